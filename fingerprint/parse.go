// Package fingerprint turns JSON documents into their RFC 8785 canonical form
// and requests into the fingerprint that binds an idempotency key to one
// exact command.
//
// The parser is strict on purpose. A fingerprint is a promise that two
// requests mean the same thing, so anything a lenient decoder would quietly
// reinterpret (a duplicate member, a lone surrogate, a number that a double
// would round to another value) is refused with an error saying what and
// where.
package fingerprint

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Parse decodes one JSON document into map[string]any, []any, string,
// json.Number, bool and nil values. Numbers keep their literal (json.Number)
// so that nothing is rounded before canonicalization; Canonical formats them.
//
// A number is accepted only if its canonical form denotes exactly the value
// written: 1.0, 1e2, 123000000000000000 and 1e+21 pass; 9007199254740993,
// 1000000000000000000001, 0.10000000000000000001 and 1e-400 are refused with
// ErrInexactNumber, since a double would silently make them another value
// (unless limits.Rounding asks for that).
func Parse(data []byte, limits Limits) (any, error) {
	limits = limits.withDefaults()
	if len(data) > limits.MaxBytes {
		return nil, &Error{Kind: ErrTooLarge, Offset: limits.MaxBytes,
			Detail: fmt.Sprintf("%d bytes, limit %d", len(data), limits.MaxBytes)}
	}
	p := &parser{data: data, maxDepth: limits.MaxDepth, rounding: limits.Rounding}
	p.skipSpace()
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos < len(p.data) {
		return nil, p.fail(ErrSyntax, "unexpected data after the document")
	}
	return v, nil
}

// segment is one step of the path to the value being parsed; the JSON Pointer
// is only built when an error needs it.
type segment struct {
	name  string
	index int
}

type parser struct {
	data     []byte
	pos      int
	maxDepth int
	rounding bool
	path     []segment
}

func (p *parser) fail(kind error, detail string) error {
	return &Error{Kind: kind, Offset: p.pos, Path: p.pointer(), Detail: detail}
}

func (p *parser) pointer() string {
	var b strings.Builder
	for _, s := range p.path {
		b.WriteByte('/')
		if s.index >= 0 {
			b.WriteString(strconv.Itoa(s.index))
			continue
		}
		b.WriteString(strings.NewReplacer("~", "~0", "/", "~1").Replace(s.name))
	}
	return b.String()
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value() (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.fail(ErrSyntax, "unexpected end of input")
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.string()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	default:
		return nil, p.fail(ErrSyntax, fmt.Sprintf("unexpected character %s", quoteByte(c)))
	}
}

func quoteByte(c byte) string {
	if c >= 0x20 && c < 0x7f {
		return strconv.QuoteRune(rune(c))
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func (p *parser) literal(word string) error {
	if !strings.HasPrefix(string(p.data[p.pos:min(len(p.data), p.pos+len(word))]), word) {
		return p.fail(ErrSyntax, "invalid literal, expected "+word)
	}
	p.pos += len(word)
	return nil
}

func (p *parser) enter() error {
	if len(p.path) >= p.maxDepth {
		return p.fail(ErrTooDeep, fmt.Sprintf("limit %d", p.maxDepth))
	}
	return nil
}

func (p *parser) object() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '{'
	obj := map[string]any{}
	var seen folds
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		return obj, nil
	}
	for {
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.fail(ErrSyntax, "expected a member name")
		}
		keyAt := p.pos
		name, err := p.string()
		if err != nil {
			return nil, err
		}
		if err := p.duplicate(obj, &seen, name, keyAt); err != nil {
			return nil, err
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.fail(ErrSyntax, "expected ':' after member name")
		}
		p.pos++
		p.skipSpace()
		p.path = append(p.path, segment{name: name, index: -1})
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		p.path = p.path[:len(p.path)-1]
		obj[name] = v
		if done, err := p.next('}'); done || err != nil {
			return obj, err
		}
	}
}

// duplicate refuses name, read at keyAt, if obj has it already, or has a
// name a case-insensitive decoder takes for it (see folds).
func (p *parser) duplicate(obj map[string]any, seen *folds, name string, keyAt int) error {
	var detail string
	switch _, dup := obj[name]; {
	case dup:
		detail = strconv.Quote(name)
	case p.rounding:
		return nil // RFC 8785 as written: names in other cases are others
	default:
		other, folded := seen.add(obj, name)
		if !folded {
			return nil
		}
		detail = foldDetail(name, other)
	}
	p.pos = keyAt
	p.path = append(p.path, segment{name: name, index: -1})
	return p.fail(ErrDuplicateKey, detail)
}

// next consumes the separator after a member or element: it reports true at
// the closing byte, false after a comma.
func (p *parser) next(closing byte) (bool, error) {
	p.skipSpace()
	if p.pos >= len(p.data) {
		return false, p.fail(ErrSyntax, "unexpected end of input")
	}
	switch p.data[p.pos] {
	case ',':
		p.pos++
		p.skipSpace()
		return false, nil
	case closing:
		p.pos++
		return true, nil
	}
	return false, p.fail(ErrSyntax, fmt.Sprintf("expected ',' or '%c'", closing))
}

func (p *parser) array() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // '['
	arr := []any{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		return arr, nil
	}
	for i := 0; ; i++ {
		p.path = append(p.path, segment{index: i})
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		p.path = p.path[:len(p.path)-1]
		arr = append(arr, v)
		if done, err := p.next(']'); done || err != nil {
			return arr, err
		}
	}
}

func (p *parser) string() (string, error) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: no escapes, plain ASCII or valid UTF-8.
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		if c == '"' {
			s := string(p.data[start:p.pos])
			p.pos++
			return s, nil
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			break
		}
		p.pos++
	}
	buf := append([]byte(nil), p.data[start:p.pos]...)
	return p.stringSlow(buf)
}

func (p *parser) stringSlow(buf []byte) (string, error) {
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c == '\\':
			r, err := p.escape()
			if err != nil {
				return "", err
			}
			buf = utf8.AppendRune(buf, r)
		case c < 0x20:
			return "", p.fail(ErrSyntax, fmt.Sprintf("unescaped control character 0x%02x in string", c))
		case c < 0x80:
			buf = append(buf, c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size <= 1 {
				return "", p.fail(ErrInvalidUTF8, fmt.Sprintf("byte 0x%02x", c))
			}
			buf = append(buf, p.data[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
	return "", p.fail(ErrSyntax, "unterminated string")
}

// escape decodes one backslash escape, joining UTF-16 surrogate pairs and
// refusing lone surrogates, which no valid Unicode string contains.
func (p *parser) escape() (rune, error) {
	if p.pos+1 >= len(p.data) {
		return 0, p.fail(ErrSyntax, "unterminated string")
	}
	c := p.data[p.pos+1]
	if r, ok := simpleEscapes[c]; ok {
		p.pos += 2
		return r, nil
	}
	if c != 'u' {
		return 0, p.fail(ErrInvalidEscape, fmt.Sprintf("\\%c", c))
	}
	r, err := p.hex4()
	if err != nil {
		return 0, err
	}
	if !utf16.IsSurrogate(r) {
		return r, nil
	}
	if r >= 0xDC00 {
		p.pos -= 6
		return 0, p.fail(ErrInvalidEscape, fmt.Sprintf("lone low surrogate \\u%04x", r))
	}
	if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
		at := p.pos
		low, err := p.hex4()
		if err != nil {
			return 0, err
		}
		if low >= 0xDC00 && low <= 0xDFFF {
			return utf16.DecodeRune(r, low), nil
		}
		p.pos = at
	}
	p.pos -= 6 // point at the high surrogate itself
	return 0, p.fail(ErrInvalidEscape, fmt.Sprintf("lone high surrogate \\u%04x", r))
}

var simpleEscapes = map[byte]rune{
	'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t',
}

// hex4 reads "\uXXXX" at p.pos.
func (p *parser) hex4() (rune, error) {
	if p.pos+6 > len(p.data) {
		return 0, p.fail(ErrInvalidEscape, "truncated \\u escape")
	}
	v, err := strconv.ParseUint(string(p.data[p.pos+2:p.pos+6]), 16, 16)
	if err != nil {
		return 0, p.fail(ErrInvalidEscape, fmt.Sprintf("bad hex digits in \\u%s", p.data[p.pos+2:p.pos+6]))
	}
	p.pos += 6
	return rune(v), nil
}

func (p *parser) number() (any, error) {
	start := p.pos
	if err := p.scanNumber(); err != nil {
		return nil, err
	}
	lit := string(p.data[start:p.pos])
	if detail, kind := checkNumber(lit, p.rounding); kind != nil {
		p.pos = start
		return nil, p.fail(kind, detail)
	}
	return json.Number(lit), nil
}

// scanNumber moves past one number of the JSON grammar, or says where it
// departs from it.
func (p *parser) scanNumber() error {
	if p.pos < len(p.data) && p.data[p.pos] == '-' {
		p.pos++
	}
	intStart := p.pos
	if !p.digits() {
		return p.fail(ErrSyntax, "expected a digit")
	}
	if p.data[intStart] == '0' && p.pos-intStart > 1 {
		p.pos = intStart
		return p.fail(ErrSyntax, "leading zero in number")
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if !p.digits() {
			return p.fail(ErrSyntax, "expected a digit after '.'")
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if !p.digits() {
			return p.fail(ErrSyntax, "expected a digit in exponent")
		}
	}
	return nil
}

func (p *parser) digits() bool {
	start := p.pos
	for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
		p.pos++
	}
	return p.pos > start
}
