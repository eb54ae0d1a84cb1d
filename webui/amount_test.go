package webui

import (
	"fmt"
	"testing"
)

// TestAmountsOf: a schema marks an integer member as minor units with
// x-idemgate-minor-units, naming where the currency is (a JSON Pointer)
// or which it is (an ISO 4217 code); nested members are found; a mark
// that is neither is refused.
func TestAmountsOf(t *testing.T) {
	schema := `{"type":"object","properties":{
	  "amount_minor":{"type":"integer","x-idemgate-minor-units":"/currency"},
	  "currency":{"type":"string"},
	  "fee":{"type":"object","properties":{"cents":{"type":"integer","x-idemgate-minor-units":"USD"}}},
	  "a/b":{"type":"integer","x-idemgate-minor-units":"JPY"}}}`
	got, err := AmountsOf([]byte(schema))
	if err != nil {
		t.Fatal(err)
	}
	if want := "[{/amount_minor /currency} {/a~1b JPY} {/fee/cents USD}]"; fmt.Sprint(got) != want {
		t.Errorf("marks: %v, want %s", got, want)
	}
	for _, bad := range []string{`{"properties":{"x":{"x-idemgate-minor-units":"euro"}}}`,
		`{"properties":{"x":{"x-idemgate-minor-units":7}}}`, `{"properties":`} {
		if _, err := AmountsOf([]byte(bad)); err == nil {
			t.Errorf("%s: accepted", bad)
		}
	}
}

// TestMinorUnits: an amount in minor units written as a person reads it,
// with the currency's own number of decimals (ISO 4217), exactly,
// whatever its size.
func TestMinorUnits(t *testing.T) {
	for _, c := range []struct{ minor, cur, want string }{
		{"4999900", "EUR", "49,999.00 EUR"},
		{"5", "EUR", "0.05 EUR"},
		{"-1250", "USD", "-12.50 USD"},
		{"4999900", "JPY", "4,999,900 JPY"},
		{"1234", "KWD", "1.234 KWD"},
		{"123456789012345678901234567890", "EUR", "1,234,567,890,123,456,789,012,345,678.90 EUR"},
		{"0", "EUR", "0.00 EUR"},
	} {
		if got, ok := minorUnits(c.minor, c.cur); !ok || got != c.want {
			t.Errorf("minorUnits(%s, %s) = %q %t, want %q", c.minor, c.cur, got, ok, c.want)
		}
	}
	for _, c := range [][2]string{{"12.5", "EUR"}, {"1e3", "EUR"}, {`"12"`, "EUR"}, {"12", "eur"}, {"12", "EURO"}} {
		if got, ok := minorUnits(c[0], c[1]); ok {
			t.Errorf("minorUnits(%s, %s) = %q, want none", c[0], c[1], got)
		}
	}
}

// TestFieldsShowAmounts: a marked member's field carries the amount
// formatted with the currency read from the command.
func TestFieldsShowAmounts(t *testing.T) {
	fields, _ := fieldsOf([]byte(`{"amount_minor":4999900,"currency":"EUR","n":7}`),
		[]Amount{{Pointer: "/amount_minor", Currency: "/currency"}, {Pointer: "/n", Currency: "/missing"}})
	if want := "[{/amount_minor 4999900 49,999.00 EUR} {/currency \"EUR\" } {/n 7 }]"; fmt.Sprint(fields) != want {
		t.Errorf("fields %v, want %s", fields, want)
	}
}
