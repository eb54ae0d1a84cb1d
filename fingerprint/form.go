package fingerprint

import (
	"bytes"
	"fmt"
	"strings"
	"unicode/utf8"
)

// DefaultMaxFields bounds the pairs of a form body: far more than any API
// form has, few enough that a body of "&&&&" costs nothing.
const DefaultMaxFields = 1000

// ParseForm decodes an application/x-www-form-urlencoded body (Stripe,
// Twilio and Slack style APIs) into the command it is fingerprinted as: an
// object of name → []any of string values, in the order they appear, so
// "a=1&b=2&a=3" is {"a":["1","3"],"b":["2"]}. '+' is a space; a pair without
// '=' has the value ""; an empty pair ("a=1&&b=2", a leading or trailing '&')
// is skipped, as url.ParseQuery and the WHATWG URL standard skip it, since it
// names nothing. What it accepts, it decodes as url.ParseQuery does.
//
// It is stricter than url.ParseQuery, which keeps going past what it cannot
// read: a bad percent escape (ErrInvalidEscape), a name or value that is not
// UTF-8 once decoded (ErrInvalidUTF8), a ';' (ErrFormSyntax: some servers take
// it for '&', so it is refused rather than guessed), more than limits.MaxBytes
// bytes or limits.MaxFields pairs (ErrTooLarge) are an *Error with the offset
// and the JSON Pointer of the name (/name) or of the value (/name/index).
func ParseForm(data []byte, limits Limits) (map[string]any, error) {
	limits = limits.withDefaults()
	if len(data) > limits.MaxBytes {
		return nil, &Error{Kind: ErrTooLarge, Offset: limits.MaxBytes,
			Detail: fmt.Sprintf("%d bytes, limit %d", len(data), limits.MaxBytes)}
	}
	form := map[string]any{}
	var seen folds
	for start, pairs := 0, 1; start <= len(data); pairs++ {
		if pairs > limits.MaxFields {
			return nil, &Error{Kind: ErrTooLarge, Offset: start,
				Detail: fmt.Sprintf("more than %d pairs", limits.MaxFields)}
		}
		end := bytes.IndexByte(data[start:], '&')
		if end < 0 {
			end = len(data) - start
		}
		if err := addPair(form, &seen, data, start, start+end); err != nil {
			return nil, err
		}
		start += end + 1
	}
	return form, nil
}

// addPair decodes the pair at data[start:end] into form. A name may come
// again (its values are a list), but not in another case (see folds).
func addPair(form map[string]any, seen *folds, data []byte, start, end int) error {
	pair := data[start:end]
	if len(pair) == 0 {
		return nil
	}
	rawName, rawValue, _ := bytes.Cut(pair, []byte("="))
	namePath := []segment{{name: strings.ToValidUTF8(string(rawName), "\uFFFD"), index: -1}}
	if i := bytes.IndexByte(pair, ';'); i >= 0 {
		return formError(ErrFormSyntax, start+i, namePath, "';' in a pair: only '&' separates pairs")
	}
	name, at, kind := unescapeForm(rawName)
	if kind != nil {
		return formError(kind, start+at, namePath, describe(kind, rawName, at, "name"))
	}
	values, _ := form[name].([]any)
	if values == nil {
		if other, folded := seen.add(form, name); folded {
			return formError(ErrDuplicateKey, start, []segment{{name: name, index: -1}}, foldDetail(name, other))
		}
	}
	valuePath := []segment{{name: name, index: -1}, {index: len(values)}}
	value, at, kind := unescapeForm(rawValue)
	if kind != nil {
		valueAt := start + len(rawName) + 1
		return formError(kind, valueAt+at, valuePath, describe(kind, rawValue, at, "value"))
	}
	form[name] = append(values, value)
	return nil
}

func formError(kind error, offset int, path []segment, detail string) error {
	p := parser{path: path}
	return &Error{Kind: kind, Offset: offset, Path: p.pointer(), Detail: detail}
}

// describe says what is wrong at raw[at], in the name or the value.
func describe(kind error, raw []byte, at int, what string) string {
	if kind == ErrInvalidEscape {
		return fmt.Sprintf("%q in the %s is not %%XX with two hex digits", raw[at:min(len(raw), at+3)], what)
	}
	return "in the " + what + ", once decoded"
}

// unescapeForm decodes one name or value: %XX escapes and '+' for space. On
// failure it returns the kind and the offset in raw of the escape or of the
// byte where the decoded text stops being UTF-8.
func unescapeForm(raw []byte) (string, int, error) {
	if bytes.IndexByte(raw, '%') < 0 && bytes.IndexByte(raw, '+') < 0 {
		if !utf8.Valid(raw) {
			return "", invalidUTF8At(raw), ErrInvalidUTF8
		}
		return string(raw), 0, nil
	}
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; c {
		case '%':
			if i+2 >= len(raw) || !isHex(raw[i+1]) || !isHex(raw[i+2]) {
				return "", i, ErrInvalidEscape
			}
			out = append(out, unhex(raw[i+1])<<4|unhex(raw[i+2]))
			i += 2
		case '+':
			out = append(out, ' ')
		default:
			out = append(out, c)
		}
	}
	if !utf8.Valid(out) {
		return "", rawOffset(raw, invalidUTF8At(out)), ErrInvalidUTF8
	}
	return string(out), 0, nil
}

// invalidUTF8At is the offset of the first byte of b that does not start a
// valid UTF-8 sequence.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(b)
}

// rawOffset maps the offset of a decoded byte back to the raw text, where a
// %XX escape is three bytes for one.
func rawOffset(raw []byte, decoded int) int {
	i := 0
	for ; decoded > 0 && i < len(raw); decoded-- {
		if raw[i] == '%' {
			i += 3
		} else {
			i++
		}
	}
	return i
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}
