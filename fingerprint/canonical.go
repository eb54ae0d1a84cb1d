package fingerprint

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Canonicalize parses data and returns its RFC 8785 canonical form. Numbers
// follow Parse's exact-value rule, or are rounded if limits.Rounding says so.
func Canonicalize(data []byte, limits Limits) ([]byte, error) {
	v, err := Parse(data, limits)
	if err != nil {
		return nil, err
	}
	return canonical(v, limits.Rounding)
}

// Canonical serializes a value made of map[string]any, []any, string,
// json.Number, float64, integers, bool and nil as RFC 8785 canonical JSON:
// members sorted by UTF-16 code units, numbers as ECMAScript prints them,
// minimal string escaping, no whitespace. Values built by code rather than by
// Parse go through the same checks (valid UTF-8; a json.Number or an integer
// only if its canonical form denotes exactly its value, so int64(1)<<60 is
// refused; a float64 or float32 stands for its shortest decimal and passes if
// finite).
func Canonical(v any) ([]byte, error) {
	return canonical(v, false)
}

func canonical(v any, rounding bool) ([]byte, error) {
	w := writer{buf: make([]byte, 0, 256), rounding: rounding}
	if err := w.value(v); err != nil {
		return nil, err
	}
	return w.buf, nil
}

type writer struct {
	buf      []byte
	path     []segment
	rounding bool // json.Number literals are rounded (Limits.Rounding)
}

func (w *writer) fail(kind error, detail string) error {
	p := parser{path: w.path}
	return &Error{Kind: kind, Offset: -1, Path: p.pointer(), Detail: detail}
}

func (w *writer) value(v any) error {
	switch x := v.(type) {
	case nil:
		w.buf = append(w.buf, "null"...)
	case bool:
		w.buf = strconv.AppendBool(w.buf, x)
	case string:
		return w.string(x)
	case json.Number:
		return w.numberLiteral(string(x))
	case map[string]any:
		return w.nested(func() error { return w.object(x) })
	case []any:
		return w.nested(func() error { return w.array(x) })
	default:
		if done, err := w.goNumber(v); done {
			return err
		}
		return w.fail(ErrUnsupported, fmt.Sprintf("type %T", v))
	}
	return nil
}

// goNumber writes Go's number types; done is false for any other value.
func (w *writer) goNumber(v any) (done bool, err error) {
	switch x := v.(type) {
	case float64:
		return true, w.float(x)
	case float32:
		// The decimal a float32 stands for (0.1), not its binary
		// expansion as a double (0.10000000149011612).
		f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
		return true, w.float(f)
	case int:
		return true, w.integer(int64(x))
	case int8:
		return true, w.integer(int64(x))
	case int16:
		return true, w.integer(int64(x))
	case int32:
		return true, w.integer(int64(x))
	case int64:
		return true, w.integer(x)
	case uint:
		return true, w.unsigned(uint64(x))
	case uint8:
		return true, w.unsigned(uint64(x))
	case uint16:
		return true, w.unsigned(uint64(x))
	case uint32:
		return true, w.unsigned(uint64(x))
	case uint64:
		return true, w.unsigned(x)
	}
	return false, nil
}

// nested writes a container one level deeper, within the same depth limit
// Parse applies, so that values built by code cannot recurse without end.
func (w *writer) nested(write func() error) error {
	if len(w.path) >= DefaultMaxDepth {
		return w.fail(ErrTooDeep, fmt.Sprintf("limit %d", DefaultMaxDepth))
	}
	return write()
}

// integer writes n as itself if its canonical form denotes it: always up to
// 2^53, and beyond where the nearest double prints as the same digits
// (1<<53 + 2 does; 1<<60 would print as 1152921504606847000).
func (w *writer) integer(n int64) error {
	if n >= -maxExactInteger && n <= maxExactInteger {
		w.buf = strconv.AppendInt(w.buf, n, 10)
		return nil
	}
	return w.wideInteger(strconv.FormatInt(n, 10), float64(n))
}

// unsigned is integer for the unsigned types, which reach beyond int64.
func (w *writer) unsigned(u uint64) error {
	if u <= maxExactInteger {
		w.buf = strconv.AppendUint(w.buf, u, 10)
		return nil
	}
	return w.wideInteger(strconv.FormatUint(u, 10), float64(u))
}

// wideInteger writes an integer beyond 2^53 given as its decimal digits and
// its nearest double. Below 1e21 ECMAScript prints every double as plain
// digits, so the two strings are equal exactly when the values are.
func (w *writer) wideInteger(digits string, f float64) error {
	n := len(w.buf)
	w.buf = AppendNumber(w.buf, f)
	if canon := string(w.buf[n:]); canon != digits {
		w.buf = w.buf[:n]
		return w.fail(ErrInexactNumber, digits+" would become "+canon)
	}
	return nil
}

// numberLiteral writes a json.Number, from Parse or built by code, which must
// then be a number of the JSON grammar (not "0x10", "+1" or ".5").
func (w *writer) numberLiteral(lit string) error {
	p := parser{data: []byte(lit)}
	if p.scanNumber() != nil || p.pos != len(lit) {
		return w.fail(ErrSyntax, "bad number "+strconv.Quote(lit))
	}
	if detail, kind := checkNumber(lit, w.rounding); kind != nil {
		return w.fail(kind, detail)
	}
	f, _ := strconv.ParseFloat(lit, 64) // checked: finite
	w.buf = AppendNumber(w.buf, f)
	return nil
}

func (w *writer) float(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return w.fail(ErrNumberRange, strconv.FormatFloat(f, 'g', -1, 64))
	}
	w.buf = AppendNumber(w.buf, f)
	return nil
}

// AppendNumber appends f as ECMAScript's Number.prototype.toString prints it,
// which is what RFC 8785 requires. f must be finite.
func AppendNumber(b []byte, f float64) []byte {
	if f == 0 {
		return append(b, '0') // -0 as well
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	b = strconv.AppendFloat(b, f, format, -1, 64)
	if format == 'e' {
		// Go writes "1e-07"; ECMAScript writes "1e-7".
		n := len(b)
		if n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return b
}

func (w *writer) string(s string) error {
	if !utf8.ValidString(s) {
		return w.fail(ErrInvalidUTF8, "in string")
	}
	w.buf = appendString(w.buf, s)
	return nil
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as an RFC 8785 string, for encoders of fixed
// shapes (the audit log's events) that write canonical JSON without a
// map. s must be valid UTF-8.
func AppendString(b []byte, s string) []byte { return appendString(b, s) }

// appendString writes s with the minimal escaping of RFC 8785: the two
// mandatory escapes, the short forms for \b \t \n \f \r, \u00xx for the other
// control characters, and every other character as itself.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\b':
			b = append(b, '\\', 'b')
		case '\t':
			b = append(b, '\\', 't')
		case '\n':
			b = append(b, '\\', 'n')
		case '\f':
			b = append(b, '\\', 'f')
		case '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

func (w *writer) object(m map[string]any) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		if !utf8.ValidString(k) {
			return w.fail(ErrInvalidUTF8, "in member name")
		}
		keys = append(keys, k)
	}
	slices.SortFunc(keys, compareUTF16)
	w.buf = append(w.buf, '{')
	for i, k := range keys {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.buf = appendString(w.buf, k)
		w.buf = append(w.buf, ':')
		w.path = append(w.path, segment{name: k, index: -1})
		if err := w.value(m[k]); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
	}
	w.buf = append(w.buf, '}')
	return nil
}

func (w *writer) array(a []any) error {
	w.buf = append(w.buf, '[')
	for i, v := range a {
		if i > 0 {
			w.buf = append(w.buf, ',')
		}
		w.path = append(w.path, segment{index: i})
		if err := w.value(v); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
	}
	w.buf = append(w.buf, ']')
	return nil
}

// compareUTF16 orders strings by their UTF-16 code units, as RFC 8785
// requires. It differs from byte order only where a character above U+FFFF
// (a surrogate pair, 0xD800..) meets one in U+E000..U+FFFF.
func compareUTF16(a, b string) int {
	for a != "" && b != "" {
		ra, na := utf8.DecodeRuneInString(a)
		rb, nb := utf8.DecodeRuneInString(b)
		if ra != rb {
			ua, ub := firstUnit(ra), firstUnit(rb)
			if ua != ub {
				return int(ua) - int(ub)
			}
			return int(ra) - int(rb)
		}
		a, b = a[na:], b[nb:]
	}
	return len(a) - len(b)
}

// firstUnit is the first UTF-16 code unit of r.
func firstUnit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xD800 + (r-0x10000)>>10
}
