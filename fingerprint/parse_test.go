package fingerprint_test

import (
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/fingerprint"
)

func TestCanonicalizeExamples(t *testing.T) {
	cases := []struct{ in, want string }{
		{`{"b":1e30,"a":[333333333.3333333]}`, `{"a":[333333333.3333333],"b":1e+30}`},
		{` [ 1 , 2.50 , -0 , 0.0 , 1E-7, 1e-6, 1e21, 1000000000000000 ] `, `[1,2.5,0,0,1e-7,0.000001,1e+21,1000000000000000]`},
		{`9007199254740992`, `9007199254740992`},
		{`-9007199254740992`, `-9007199254740992`},
		{`9007199254740992.0`, `9007199254740992`},
		{`0e-400`, `0`},
		{`-0.0e99999999999999999999`, `0`},
		{`[1e21,-1e21,1.5e300]`, `[1e+21,-1e+21,1.5e+300]`},
		{`"\u00e9\ud83d\ude00\u2028/\u001f"`, "\"é😀\u2028/\\u001f\""},
		{`{"\ue000":1,"\ud800\udc00":2}`, "{\"\U00010000\":2,\"\ue000\":1}"},
		{`{"aa":1,"a":2,"b":{"z":null,"y":[true,false]}}`, `{"a":2,"aa":1,"b":{"y":[true,false],"z":null}}`},
		{`""`, `""`},
	}
	for _, c := range cases {
		got, err := fingerprint.Canonicalize([]byte(c.in), fingerprint.Limits{})
		if err != nil {
			t.Errorf("%s: %v", c.in, err)
			continue
		}
		if string(got) != c.want {
			t.Errorf("%s:\n got %s\nwant %s", c.in, got, c.want)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	deep := strings.Repeat("[", 65) + strings.Repeat("]", 65)
	cases := []struct {
		name, in string
		kind     error
		where    string // a fragment the message must contain
	}{
		{"empty", ``, fingerprint.ErrSyntax, "offset 0"},
		{"trailing", `{} {}`, fingerprint.ErrSyntax, "after the document"},
		{"bad literal", `[tru]`, fingerprint.ErrSyntax, "path /0"},
		{"single quotes", `{'a':1}`, fingerprint.ErrSyntax, "offset 1"},
		{"trailing comma", `[1,]`, fingerprint.ErrSyntax, "offset 3"},
		{"leading zero", `[01]`, fingerprint.ErrSyntax, "leading zero"},
		{"plus sign", `+1`, fingerprint.ErrSyntax, "offset 0"},
		{"NaN", `NaN`, fingerprint.ErrSyntax, "offset 0"},
		{"bare dot", `1.`, fingerprint.ErrSyntax, "after '.'"},
		{"raw control", "\"a\tb\"", fingerprint.ErrSyntax, "control character 0x09"},
		{"unterminated", `{"a":"b`, fingerprint.ErrSyntax, "unterminated"},
		{"invalid utf8", "{\"a\":\"\xff\"}", fingerprint.ErrInvalidUTF8, "path /a"},
		{"utf8 surrogate", "\"\xed\xa0\x80\"", fingerprint.ErrInvalidUTF8, "offset 1"},
		{"overlong utf8", "\"\xc0\xaf\"", fingerprint.ErrInvalidUTF8, "offset 1"},
		{"lone high", `"\ud800"`, fingerprint.ErrInvalidEscape, "lone high surrogate"},
		{"lone low", `"\udc00x"`, fingerprint.ErrInvalidEscape, "lone low surrogate"},
		{"high then bmp", `"\ud800\u0041"`, fingerprint.ErrInvalidEscape, "lone high"},
		{"bad escape", `"\x"`, fingerprint.ErrInvalidEscape, `\x`},
		{"bad hex", `"\u12g4"`, fingerprint.ErrInvalidEscape, "hex"},
		{"duplicate", `{"a":{"b":1,"b":2}}`, fingerprint.ErrDuplicateKey, "path /a/b"},
		{"duplicate after escape", `{"a":1,"\u0061":2}`, fingerprint.ErrDuplicateKey, `"a"`},
		// Names a case-insensitive decoder takes for one (issue 24, 7.2):
		// `when` reads the first, Go's encoding/json keeps the last.
		{"case variant", `{"environment":"staging","Environment":"production"}`, fingerprint.ErrDuplicateKey,
			`"Environment" and "environment" are one name to a case-insensitive decoder at offset 25 (path /Environment)`},
		{"case variant nested", `{"a":{"ID":1,"x":2,"id":3}}`, fingerprint.ErrDuplicateKey, "path /a/id"},
		{"long s", `{"status":"ok","\u017ftatus":"x"}`, fingerprint.ErrDuplicateKey, "path /ſtatus"},
		{"kelvin sign", `{"\u212aey":1,"key":2}`, fingerprint.ErrDuplicateKey, "path /key"},
		{"full folding", `{"straße":1,"STRASSE":2}`, fingerprint.ErrDuplicateKey, "path /STRASSE"},
		{"dotted capital I", `{"İd":1,"i\u0307d":2}`, fingerprint.ErrDuplicateKey, "one name"},
		{"too deep", deep, fingerprint.ErrTooDeep, "limit 64"},
		{"inexact integer", `{"amount":9007199254740993}`, fingerprint.ErrInexactNumber, "path /amount"},
		{"inexact negative", `[-12345678901234567890]`, fingerprint.ErrInexactNumber, "path /0"},
		{"huge", `[1e400]`, fingerprint.ErrNumberRange, "1e400"},
		{"inexact with fraction", `{"a":9007199254740993.0}`, fingerprint.ErrInexactNumber, "path /a"},
		{"inexact with exponent", `[90071992547409930e-1]`, fingerprint.ErrInexactNumber, "path /0"},
		{"inexact beyond 1e21", `[1000000000000000000001]`, fingerprint.ErrInexactNumber, "offset 1"},
		{"inexact fraction", `{"rate":0.10000000000000000001}`, fingerprint.ErrInexactNumber,
			"0.10000000000000000001 would become 0.1"},
		{"2^60", `[1152921504606846976]`, fingerprint.ErrInexactNumber, "would become 1152921504606847000"},
		{"underflow", `[1e-400]`, fingerprint.ErrInexactNumber, "1e-400 would become 0 "},
		{"inexact, said plainly", `[9007199254740993]`, fingerprint.ErrInexactNumber,
			"number cannot be represented exactly: 9007199254740993 would become 9007199254740992"},
		{"long literal cut", `[0.` + strings.Repeat("1", 100) + `]`, fingerprint.ErrInexactNumber,
			"1111... would become 0.1111111111111111"},
		{"lone high offset", `["\ud800x"]`, fingerprint.ErrInvalidEscape, "offset 2"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := fingerprint.Parse([]byte(c.in), fingerprint.Limits{})
			if !errors.Is(err, c.kind) {
				t.Fatalf("error %v, want kind %v", err, c.kind)
			}
			var fe *fingerprint.Error
			if !errors.As(err, &fe) {
				t.Fatalf("error %T is not a *fingerprint.Error", err)
			}
			if !strings.Contains(err.Error(), c.where) {
				t.Errorf("message %q does not say %q", err, c.where)
			}
		})
	}
}

// TestParseKeepsNamesThatNoDecoderConflates: names that differ by more
// than case stay apart, as do the same name in two objects.
func TestParseKeepsNamesThatNoDecoderConflates(t *testing.T) {
	for _, in := range []string{`{"a":{"A":1},"b":{"a":2}}`, `{"id":1,"ids":2,"i_d":3}`, `{"é":1,"e\u0301":2}`,
		`{"Environment":"x","environments":[{"environment":1}]}`, `[{"a":1},{"A":2}]`} {
		if _, err := fingerprint.Parse([]byte(in), fingerprint.Limits{}); err != nil {
			t.Errorf("%s: %v", in, err)
		}
	}
}

func TestParseLimits(t *testing.T) {
	body := `{"a":"` + strings.Repeat("x", 100) + `"}`
	_, err := fingerprint.Parse([]byte(body), fingerprint.Limits{MaxBytes: 50})
	if !errors.Is(err, fingerprint.ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if _, err := fingerprint.Parse([]byte(body), fingerprint.Limits{MaxBytes: len(body)}); err != nil {
		t.Fatalf("a document exactly at the limit is refused: %v", err)
	}
	if _, err := fingerprint.Parse([]byte(`[[[1]]]`), fingerprint.Limits{MaxDepth: 3}); err != nil {
		t.Fatalf("depth 3 refused at limit 3: %v", err)
	}
	if _, err := fingerprint.Parse([]byte(`[[[[1]]]]`), fingerprint.Limits{MaxDepth: 3}); !errors.Is(err, fingerprint.ErrTooDeep) {
		t.Fatalf("depth 4 at limit 3: %v", err)
	}
}

func TestParseKeepsNumberLiterals(t *testing.T) {
	v, err := fingerprint.Parse([]byte(`{"amount_minor":1999,"rate":0.10}`), fingerprint.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	m := v.(map[string]any)
	if m["amount_minor"] != json.Number("1999") || m["rate"] != json.Number("0.10") {
		t.Fatalf("numbers not kept as literals: %#v", m)
	}
}

func TestCanonicalOfBuiltValues(t *testing.T) {
	got, err := fingerprint.Canonical(map[string]any{"n": 3, "f": 0.5, "u": uint64(7), "s": []any{"x", nil},
		"i8": int8(-8), "u16": uint16(16), "f32": float32(0.1)})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != `{"f":0.5,"f32":0.1,"i8":-8,"n":3,"s":["x",null],"u":7,"u16":16}` {
		t.Fatalf("got %s", got)
	}
	var deep any = "x"
	for range 100 {
		deep = []any{deep}
	}
	if _, err := fingerprint.Canonical(deep); !errors.Is(err, fingerprint.ErrTooDeep) {
		t.Fatalf("100 levels built in code: %v", err)
	}
	refused := map[error][]any{
		fingerprint.ErrInexactNumber: {int64(1) << 60, -(int64(1) << 60), uint64(1) << 63, uint64(math.MaxUint64),
			int64(math.MaxInt64), json.Number("9007199254740993"), json.Number("1e-400")},
		fingerprint.ErrNumberRange: {json.Number("1e999"), math.Inf(1), math.NaN(), float32(math.Inf(-1))},
		fingerprint.ErrSyntax:      {json.Number("0x10"), json.Number("+1"), json.Number(".5"), json.Number(""), json.Number("1 ")},
		fingerprint.ErrInvalidUTF8: {[]any{"\xff"}, map[string]any{"\xfe": 1}},
		fingerprint.ErrUnsupported: {struct{}{}, complex(1, 0)},
	}
	for kind, values := range refused {
		for _, v := range values {
			if _, err := fingerprint.Canonical(v); !errors.Is(err, kind) {
				t.Errorf("Canonical(%#v): %v, want %v", v, err, kind)
			}
		}
	}
	if _, err := fingerprint.Canonical(map[string]any{"x": int64(1) << 60}); err == nil ||
		!strings.Contains(err.Error(), "1152921504606846976 would become 1152921504606847000") ||
		!strings.Contains(err.Error(), "path /x") {
		t.Errorf("1<<60: %v", err)
	}
}

// TestCanonicalOfWideIntegers: an integer built by code beyond 2^53 passes
// when the double nearest it prints as the same digits.
func TestCanonicalOfWideIntegers(t *testing.T) {
	for v, want := range map[any]string{
		int64(1)<<53 + 2:                 "9007199254740994",
		-(int64(1)<<53 + 2):              "-9007199254740994",
		int64(1) << 54:                   "18014398509481984",
		int64(1000000000000000000):       "1000000000000000000",
		uint64(10000000000000000000):     "10000000000000000000",
		uint(1) << 53:                    "9007199254740992",
		1e20:                             "100000000000000000000",
		json.Number("18014398509481984"): "18014398509481984",
		float32(16777216):                "16777216",
	} {
		got, err := fingerprint.Canonical(v)
		if err != nil || string(got) != want {
			t.Errorf("Canonical(%#v) = %s, %v; want %s", v, got, err, want)
		}
	}
}

// TestExactNumbers: a literal passes exactly when its canonical form denotes
// the value written, however it is written.
func TestExactNumbers(t *testing.T) {
	for in, want := range map[string]string{
		"1.0": "1", "1e2": "100", "123000000000000000": "123000000000000000", "1e+21": "1e+21",
		"0.1": "0.1", "1.23e17": "123000000000000000", "9007199254740994": "9007199254740994",
		"1152921504606847000": "1152921504606847000", "-9007199254740994.000": "-9007199254740994",
		"1.5e16": "15000000000000000", "1e20": "100000000000000000000", "100000000000000000000": "100000000000000000000",
		"0.30000000000000004": "0.30000000000000004", "5e-324": "5e-324", "1.7976931348623157e308": "1.7976931348623157e+308",
		"4.35": "4.35", "-0": "0",
		"0.000001": "0.000001", "1E-7": "1e-7", "2.2250738585072014E-308": "2.2250738585072014e-308",
	} {
		got, err := fingerprint.Canonicalize([]byte(in), fingerprint.Limits{})
		if err != nil || string(got) != want {
			t.Errorf("%s: got %s, %v; want %s", in, got, err, want)
		}
	}
}

// TestRounding: the RFC 8785 mode rounds what the strict mode refuses, and
// still refuses what no double can hold.
func TestRounding(t *testing.T) {
	rounding := fingerprint.Limits{Rounding: true}
	for in, want := range map[string]string{
		"9007199254740993": "9007199254740992", "0.10000000000000000001": "0.1", "1e-400": "0",
		"1152921504606846976": "1152921504606847000", "333333333.33333329": "333333333.3333333",
	} {
		got, err := fingerprint.Canonicalize([]byte(in), rounding)
		if err != nil || string(got) != want {
			t.Errorf("%s: got %s, %v; want %s", in, got, err, want)
		}
		if _, err := fingerprint.Canonicalize([]byte(in), fingerprint.Limits{}); !errors.Is(err, fingerprint.ErrInexactNumber) {
			t.Errorf("%s in strict mode: %v", in, err)
		}
	}
	if _, err := fingerprint.Canonicalize([]byte("1e400"), rounding); !errors.Is(err, fingerprint.ErrNumberRange) {
		t.Errorf("1e400 rounded: %v", err)
	}
	v, _ := fingerprint.Parse([]byte("[9007199254740993]"), rounding)
	if _, err := fingerprint.Canonical(v); !errors.Is(err, fingerprint.ErrInexactNumber) {
		t.Errorf("Canonical rounded a literal parsed with rounding: %v", err)
	}
}
