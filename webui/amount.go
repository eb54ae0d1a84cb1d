package webui

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// MinorUnitsKeyword is the JSON Schema keyword that marks an integer
// member as an amount in minor units of a currency (docs/design.md,
// "Approvals"): its value is a JSON Pointer to the member of the command
// that names the currency ("/currency"), or the currency's ISO 4217 code
// itself ("EUR"). The page shows such an amount formatted beside the raw
// value: 4999900 with "EUR" reads 49,999.00 EUR.
const MinorUnitsKeyword = "x-idemgate-minor-units"

// Amount is a member of a route's command marked as minor units.
type Amount struct {
	Pointer  string // the member, as a JSON Pointer: "/amount_minor"
	Currency string // a JSON Pointer to the currency's member, or an ISO 4217 code
}

var isoCode = regexp.MustCompile(`^[A-Z]{3}$`)

// AmountsOf reads the MinorUnitsKeyword marks of a JSON Schema document,
// on the members its objects' properties reach (nested objects too), in
// pointer order. A mark that is neither a JSON Pointer nor an ISO 4217
// code is refused, so that a typo fails at start-up, not on a page.
func AmountsOf(schema []byte) ([]Amount, error) {
	var doc any
	if err := json.Unmarshal(schema, &doc); err != nil {
		return nil, fmt.Errorf("schema: %w", err)
	}
	var out []Amount
	if err := marks(doc, "", &out); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b Amount) int { return strings.Compare(a.Pointer, b.Pointer) })
	return out, nil
}

// marks appends the marks under the schema s, which describes the member
// at pointer at.
func marks(s any, at string, out *[]Amount) error {
	obj, ok := s.(map[string]any)
	if !ok {
		return nil
	}
	if m, has := obj[MinorUnitsKeyword]; has {
		cur, _ := m.(string)
		if !isoCode.MatchString(cur) && !strings.HasPrefix(cur, "/") {
			return fmt.Errorf("schema: %s at %s: want a JSON Pointer to the currency (\"/currency\") or an ISO 4217 code (\"EUR\"), not %v",
				MinorUnitsKeyword, at, m)
		}
		*out = append(*out, Amount{Pointer: at, Currency: cur})
	}
	props, _ := obj["properties"].(map[string]any)
	for name, p := range props {
		if err := marks(p, at+"/"+escapePointer(name), out); err != nil {
			return err
		}
	}
	return nil
}

// decimals are the ISO 4217 currencies whose minor unit is not a
// hundredth; every other code has two decimals.
var decimals = map[string]int{
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0, "RWF": 0,
	"UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	"CLF": 4, "UYW": 4,
}

var integer = regexp.MustCompile(`^-?[0-9]+$`)

// minorUnits writes an amount of minor units (an integer as JSON writes
// it) of currency as a person reads it: "49,999.00 EUR". It works on the
// digits, so no amount is rounded, however large.
func minorUnits(minor, currency string) (string, bool) {
	if !integer.MatchString(minor) || !isoCode.MatchString(currency) {
		return "", false
	}
	sign, digits := "", minor
	if strings.HasPrefix(digits, "-") {
		sign, digits = "-", digits[1:]
	}
	n, ok := decimals[currency]
	if !ok {
		n = 2
	}
	digits = strings.Repeat("0", max(0, n+1-len(digits))) + digits
	whole, frac := digits[:len(digits)-n], digits[len(digits)-n:]
	var b strings.Builder
	for i, d := range whole {
		if i > 0 && (len(whole)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	if n > 0 {
		b.WriteString("." + frac)
	}
	return sign + b.String() + " " + currency, true
}
