package fingerprint

import (
	"bytes"
	"strconv"
)

// The exact-value rule for numbers. A literal L is accepted when the RFC 8785
// form C of its nearest double denotes exactly the value of L. Both are
// decimal strings, so they are compared as such, digit for digit, never as
// floats: 0.1 passes (C is "0.1"), 9007199254740993 does not (C is
// "9007199254740992").

// maxExactInteger is 2^53: up to it every integer is a double that
// ECMAScript prints in full.
const maxExactInteger = 1 << 53

// maxDetail bounds how much of a refused literal an error repeats.
const maxDetail = 64

// checkNumber applies the rule to lit, a valid JSON number. It returns the
// kind of refusal (ErrNumberRange, ErrInexactNumber) and its detail, or a nil
// kind. With rounding (RFC 8785 as written) only the range is checked.
func checkNumber(lit string, rounding bool) (string, error) {
	if roundTrips(lit) {
		return "", nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil { // lit is well formed: the only error left is ±Inf
		return shorten(lit), ErrNumberRange
	}
	if rounding {
		return "", nil
	}
	var buf [32]byte
	canon := AppendNumber(buf[:0], f)
	if !sameValue(lit, canon) {
		return shorten(lit) + " would become " + string(canon), ErrInexactNumber
	}
	return "", nil
}

// roundTrips reports, without arithmetic, the common literals that always
// pass: zero, and those of at most 15 significant digits whose magnitude lies
// between 1e-300 and 1e300. Every such decimal comes back from its nearest
// double when rounded to 15 digits (DBL_DIG), so no other decimal of 15
// digits or fewer, the shortest form C included, rounds to the same double:
// C denotes the value written. lit must be a valid JSON number.
func roundTrips(lit string) bool {
	first, last, point, n := -1, -1, -1, 0
	i := 0
	if lit[0] == '-' {
		i = 1
	}
scan:
	for ; i < len(lit); i++ {
		switch c := lit[i]; {
		case c == '.':
			point = n
			continue
		case c == 'e' || c == 'E':
			break scan
		case c != '0':
			if first < 0 {
				first = n
			}
			last = n
		}
		n++
	}
	if first < 0 {
		return true // zero, whatever its exponent
	}
	if point < 0 {
		point = n
	}
	exp, ok := exponent(lit[i:], 1000)
	magnitude := point - first - 1 + exp // power of ten of the first significant digit
	return ok && last-first < 15 && magnitude >= -300 && magnitude <= 300
}

// exponent reads the exponent part ("", or "e" with an optional sign and
// digits) of a valid JSON number; ok is false beyond ±limit.
func exponent[T string | []byte](s T, limit int) (int, bool) {
	if len(s) == 0 {
		return 0, true
	}
	s = s[1:]
	neg := s[0] == '-'
	if s[0] == '-' || s[0] == '+' {
		s = s[1:]
	}
	e := 0
	for i := 0; i < len(s); i++ {
		e = e*10 + int(s[i]-'0')
		if e > limit {
			return 0, false
		}
	}
	if neg {
		e = -e
	}
	return e, true
}

// sameValue reports whether two valid JSON number literals denote exactly
// the same value. Literals whose exponent is beyond ±10^9 are never the same
// as another: no finite nonzero double is written so.
func sameValue(a string, b []byte) bool {
	var bufA, bufB [40]byte
	da, oka := decimalOf(a, bufA[:0])
	db, okb := decimalOf(b, bufB[:0])
	return oka && okb && da.neg == db.neg && da.exp == db.exp && bytes.Equal(da.digits, db.digits)
}

// decimal is the exact value of a literal: ±0.digits × 10^exp, with neither
// leading nor trailing zeros in digits. Zero has no digits, no sign and
// exponent 0, however it is written (-0.0e5).
type decimal struct {
	neg    bool
	digits []byte
	exp    int
}

// decimalOf reads a valid JSON number literal into its exact value, its
// digits appended to buf.
func decimalOf[T string | []byte](lit T, buf []byte) (decimal, bool) {
	var d decimal
	i := 0
	if lit[0] == '-' {
		d.neg, i = true, 1
	}
	digits := buf
	point, fraction := 0, false // point: where the point stands, in digits
	for ; i < len(lit) && lit[i] != 'e' && lit[i] != 'E'; i++ {
		switch c := lit[i]; {
		case c == '.':
			fraction = true
		case c == '0' && len(digits) == 0:
			if fraction {
				point-- // a leading zero after the point: one place smaller
			}
		default:
			digits = append(digits, c)
			if !fraction {
				point++
			}
		}
	}
	for len(digits) > 0 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
	}
	if len(digits) == 0 {
		return decimal{}, true
	}
	exp, ok := exponent(lit[i:], 1_000_000_000)
	d.digits, d.exp = digits, point+exp
	return d, ok
}

// shorten cuts a long literal down for an error message.
func shorten(lit string) string {
	if len(lit) <= maxDetail {
		return lit
	}
	return lit[:maxDetail-3] + "..."
}
