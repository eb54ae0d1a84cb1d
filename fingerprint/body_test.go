package fingerprint_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/fingerprint"
)

func TestParseBody(t *testing.T) {
	json := fingerprint.BodyOptions{}
	opaque := fingerprint.BodyOptions{Opaque: true}
	// printf '%PDF-1.7\n' | sha256sum
	const pdf = "0716f9264c9fe19f5d7455276107f3ddcc1d3497f63d60689a73558ae8a1bf5e"
	cases := []struct {
		contentType, body string
		opts              fingerprint.BodyOptions
		want              string // canonical JSON of the command
	}{
		{"application/json", `{"b":1,"a":[true]}`, json, `{"a":[true],"b":1}`},
		{"Application/JSON; charset=UTF-8", `[1.0]`, json, `[1]`},
		{"application/json;charset=\"utf-8\"", `"x"`, json, `"x"`},
		{"application/problem+json", `{"title":"x"}`, json, `{"title":"x"}`},
		{"application/vnd.api+json", `{"data":null}`, json, `{"data":null}`},
		{"application/x-www-form-urlencoded", "a=1&b=2&a=3", json, `{"a":["1","3"],"b":["2"]}`},
		{"application/x-www-form-urlencoded; charset=utf-8", "q=%E2%82%AC", json, `{"q":["€"]}`},
		{"application/json", "", json, `null`},
		{"application/json", " \n\t ", json, `null`},
		{"", "", json, `null`},
		{"text/plain", "", json, `null`},
		{"application/x-www-form-urlencoded", "", json, `null`},
		{"image/png", "", opaque, `null`},
		{"application/PDF; name=x", "%PDF-1.7\n", opaque, `{"sha256":"` + pdf + `","type":"application/pdf"}`},
		{"", "%PDF-1.7\n", opaque, `{"sha256":"` + pdf + `","type":"application/octet-stream"}`},
		{"application/json", "%PDF-1.7\n", opaque, `{"sha256":"` + pdf + `","type":"application/json"}`},
	}
	for _, c := range cases {
		v, err := fingerprint.ParseBody(c.contentType, []byte(c.body), c.opts)
		if err != nil {
			t.Errorf("%q %q: %v", c.contentType, c.body, err)
			continue
		}
		got, err := fingerprint.Canonical(v)
		if err != nil || string(got) != c.want {
			t.Errorf("%q %q: got %s, %v; want %s", c.contentType, c.body, got, err, c.want)
		}
	}
}

func TestParseBodyRefuses(t *testing.T) {
	const accepted = "accepted: application/json, */*+json, application/x-www-form-urlencoded"
	cases := []struct {
		contentType, body string
		opts              fingerprint.BodyOptions
		kind              error
		says              []string
	}{
		{"text/plain", "hello", fingerprint.BodyOptions{}, fingerprint.ErrUnsupportedMediaType,
			[]string{"text/plain was sent", accepted}},
		{"", "{}", fingerprint.BodyOptions{}, fingerprint.ErrUnsupportedMediaType,
			[]string{"without Content-Type", accepted}},
		{"json", "{}", fingerprint.BodyOptions{}, fingerprint.ErrUnsupportedMediaType,
			[]string{`"json" cannot be read`, accepted}},
		{"application/json; charset", "{}", fingerprint.BodyOptions{}, fingerprint.ErrUnsupportedMediaType,
			[]string{"cannot be read", accepted}},
		{"/", "{}", fingerprint.BodyOptions{Opaque: true}, fingerprint.ErrUnsupportedMediaType,
			[]string{"cannot be read", "accepted: any media type"}},
		{"application/+json", "{}", fingerprint.BodyOptions{}, fingerprint.ErrUnsupportedMediaType,
			[]string{"application/+json was sent"}},
		{"application/json-seq", "{}", fingerprint.BodyOptions{}, fingerprint.ErrUnsupportedMediaType, nil},
		{"multipart/form-data; boundary=x", "--x--", fingerprint.BodyOptions{}, fingerprint.ErrUnsupportedMediaType,
			[]string{"multipart/form-data was sent"}},
		{"application/json; charset=latin1", `"\u00e9"`, fingerprint.BodyOptions{}, fingerprint.ErrUnsupportedMediaType,
			[]string{`charset "latin1"`, "utf-8"}},
		{"application/x-www-form-urlencoded; charset=ISO-8859-1", "a=%E9", fingerprint.BodyOptions{},
			fingerprint.ErrUnsupportedMediaType, []string{`charset "ISO-8859-1"`}},
		{"application/json", `{"a":1,"a":2}`, fingerprint.BodyOptions{}, fingerprint.ErrDuplicateKey, []string{"path /a"}},
		{"application/json", `{"amount":9007199254740993}`, fingerprint.BodyOptions{}, fingerprint.ErrInexactNumber,
			[]string{"path /amount"}},
		{"application/json", `[[[1]]]`, fingerprint.BodyOptions{Limits: fingerprint.Limits{MaxDepth: 2}},
			fingerprint.ErrTooDeep, nil},
		{"application/x-www-form-urlencoded", "a=1;b=2", fingerprint.BodyOptions{}, fingerprint.ErrFormSyntax, nil},
		{"application/x-www-form-urlencoded", "a&b&c", fingerprint.BodyOptions{Limits: fingerprint.Limits{MaxFields: 2}},
			fingerprint.ErrTooLarge, nil},
		{"image/png", strings.Repeat("x", 11),
			fingerprint.BodyOptions{Opaque: true, Limits: fingerprint.Limits{MaxBytes: 10}},
			fingerprint.ErrTooLarge, []string{"11 bytes, limit 10"}},
		{"application/json", " " + strings.Repeat(" ", 10), fingerprint.BodyOptions{Limits: fingerprint.Limits{MaxBytes: 10}},
			fingerprint.ErrTooLarge, nil},
	}
	for _, c := range cases {
		v, err := fingerprint.ParseBody(c.contentType, []byte(c.body), c.opts)
		if !errors.Is(err, c.kind) || v != nil {
			t.Errorf("%q %q: %v, %v; want %v", c.contentType, c.body, v, err, c.kind)
			continue
		}
		for _, s := range c.says {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%q %q: %q does not say %q", c.contentType, c.body, err, s)
			}
		}
	}
}
