package fingerprint_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/fingerprint"
)

func TestParseForm(t *testing.T) {
	for in, want := range map[string]string{
		"a=1&b=2&a=3": `{"a":["1","3"],"b":["2"]}`,
		"a=1&&b=2":    `{"a":["1"],"b":["2"]}`,
		"&a=1&":       `{"a":["1"]}`,
		"":            `{}`,
		"flag":        `{"flag":[""]}`,
		"flag&flag=":  `{"flag":["",""]}`,
		"=x":          `{"":["x"]}`,
		"a=b=c":       `{"a":["b=c"]}`,
		"q=hello+world%21&%C3%A9t%C3%A9=%E2%82%AC": `{"q":["hello world!"],"été":["€"]}`,
		"amount=1999&currency=eur&metadata[order]=6735&expand[]=customer&expand[]=invoice": `{"amount":["1999"],` +
			`"currency":["eur"],"expand[]":["customer","invoice"],"metadata[order]":["6735"]}`,
		"a=%2B%26%3D%3B":                   `{"a":["+&=;"]}`,
		"z=2&a=1&z=1":                      `{"a":["1"],"z":["2","1"]}`,
		"x=%00%1f%7F":                      `{"x":["\u0000\u001f` + "\x7f" + `"]}`,
		"n=1e400&m=0.10000000000000000001": `{"m":["0.10000000000000000001"],"n":["1e400"]}`,
	} {
		v, err := fingerprint.ParseForm([]byte(in), fingerprint.Limits{})
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		got, err := fingerprint.Canonical(v)
		if err != nil || string(got) != want {
			t.Errorf("%q: got %s, %v; want %s", in, got, err, want)
		}
	}
}

func TestParseFormRefuses(t *testing.T) {
	cases := []struct {
		in     string
		limits fingerprint.Limits
		kind   error
		offset int
		path   string
		detail string
	}{
		{in: "a=1&b=%zz", kind: fingerprint.ErrInvalidEscape, offset: 6, path: "/b/0", detail: `"%zz"`},
		{in: "a=1&b=%4", kind: fingerprint.ErrInvalidEscape, offset: 6, path: "/b/0", detail: "value"},
		{in: "a%=1", kind: fingerprint.ErrInvalidEscape, offset: 1, path: "/a%", detail: "name"},
		{in: "a=1&a=%", kind: fingerprint.ErrInvalidEscape, offset: 6, path: "/a/1"},
		{in: "a=%C3%28", kind: fingerprint.ErrInvalidUTF8, offset: 2, path: "/a/0"},
		{in: "a=ok%FF", kind: fingerprint.ErrInvalidUTF8, offset: 4, path: "/a/0"},
		{in: "a=\xff", kind: fingerprint.ErrInvalidUTF8, offset: 2, path: "/a/0"},
		{in: "x=1&%ED%A0%80=1", kind: fingerprint.ErrInvalidUTF8, offset: 4, path: "/%ED%A0%80"},
		{in: "a=1;b=2", kind: fingerprint.ErrFormSyntax, offset: 3, path: "/a", detail: "only '&'"},
		{in: "a/b~c;=1", kind: fingerprint.ErrFormSyntax, offset: 5, path: "/a~1b~0c;"},
		{in: "environment=staging&Environment=production", kind: fingerprint.ErrDuplicateKey, offset: 20,
			path: "/Environment", detail: `"Environment" and "environment" are one name`},
		{in: "a=1&a=2&A=3", kind: fingerprint.ErrDuplicateKey, offset: 8, path: "/A"},
		{in: "a=" + strings.Repeat("x", 100), limits: fingerprint.Limits{MaxBytes: 50}, kind: fingerprint.ErrTooLarge,
			offset: 50, detail: "102 bytes, limit 50"},
		{in: "a&b&c&d", limits: fingerprint.Limits{MaxFields: 3}, kind: fingerprint.ErrTooLarge, offset: 6,
			detail: "more than 3 pairs"},
		{in: strings.Repeat("&", 1000), kind: fingerprint.ErrTooLarge, detail: "more than 1000 pairs"},
	}
	for _, c := range cases {
		_, err := fingerprint.ParseForm([]byte(c.in), c.limits)
		var fe *fingerprint.Error
		if !errors.As(err, &fe) || !errors.Is(err, c.kind) {
			t.Errorf("%.20q: %v, want %v", c.in, err, c.kind)
			continue
		}
		if (c.offset != 0 && fe.Offset != c.offset) || fe.Path != c.path || !strings.Contains(fe.Detail, c.detail) {
			t.Errorf("%.20q: offset %d, path %q, detail %q; want %d, %q, %q", c.in, fe.Offset, fe.Path, fe.Detail,
				c.offset, c.path, c.detail)
		}
	}
	if v, err := fingerprint.ParseForm([]byte(strings.Repeat("&", 999)), fingerprint.Limits{}); err != nil ||
		!reflect.DeepEqual(v, map[string]any{}) {
		t.Errorf("1000 empty pairs, at the limit: %v, %v", v, err)
	}
}
