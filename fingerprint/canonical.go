package fingerprint

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Canonicalize parses data and returns its RFC 8785 canonical form.
func Canonicalize(data []byte, limits Limits) ([]byte, error) {
	v, err := Parse(data, limits)
	if err != nil {
		return nil, err
	}
	return Canonical(v)
}

// Canonical serializes a value made of map[string]any, []any, string,
// json.Number, float64, integers, bool and nil as RFC 8785 canonical JSON:
// members sorted by UTF-16 code units, numbers as ECMAScript prints them,
// minimal string escaping, no whitespace. Values built by code rather than by
// Parse go through the same checks (finite numbers, safe integers, UTF-8).
func Canonical(v any) ([]byte, error) {
	w := writer{buf: make([]byte, 0, 256)}
	if err := w.value(v); err != nil {
		return nil, err
	}
	return w.buf, nil
}

type writer struct {
	buf  []byte
	path []segment
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
	case float64:
		return w.float(x)
	case float32:
		// The decimal a float32 stands for (0.1), not its binary
		// expansion as a double (0.10000000149011612).
		f, _ := strconv.ParseFloat(strconv.FormatFloat(float64(x), 'g', -1, 32), 64)
		return w.float(f)
	case map[string]any:
		return w.nested(func() error { return w.object(x) })
	case []any:
		return w.nested(func() error { return w.array(x) })
	default:
		if n, ok := asInt64(v); ok {
			return w.integer(n)
		}
		if u, ok := v.(uint64); ok {
			return w.fail(ErrUnsafeInteger, strconv.FormatUint(u, 10))
		}
		return w.fail(ErrUnsupported, fmt.Sprintf("type %T", v))
	}
	return nil
}

// asInt64 widens Go's integer types; a uint64 beyond int64 is not one.
func asInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint:
		return int64(x), uint64(x) <= math.MaxInt64
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), x <= math.MaxInt64
	}
	return 0, false
}

// nested writes a container one level deeper, within the same depth limit
// Parse applies, so that values built by code cannot recurse without end.
func (w *writer) nested(write func() error) error {
	if len(w.path) >= DefaultMaxDepth {
		return w.fail(ErrTooDeep, fmt.Sprintf("limit %d", DefaultMaxDepth))
	}
	return write()
}

func (w *writer) integer(n int64) error {
	if n > MaxSafeInteger || n < -MaxSafeInteger {
		return w.fail(ErrUnsafeInteger, strconv.FormatInt(n, 10))
	}
	w.buf = strconv.AppendInt(w.buf, n, 10)
	return nil
}

func (w *writer) numberLiteral(lit string) error {
	integer := true
	for i := 0; i < len(lit); i++ {
		if c := lit[i]; c == '.' || c == 'e' || c == 'E' {
			integer = false
			break
		}
	}
	if err := checkNumber(lit, integer); err != nil {
		return w.fail(err, lit)
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil {
		return w.fail(ErrSyntax, "bad number "+strconv.Quote(lit))
	}
	return w.float(f)
}

func (w *writer) float(f float64) error {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return w.fail(ErrNumberRange, strconv.FormatFloat(f, 'g', -1, 64))
	}
	if unsafeInteger(f) {
		return w.fail(ErrUnsafeInteger, strconv.FormatFloat(f, 'f', -1, 64))
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
