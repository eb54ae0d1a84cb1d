package fingerprint_test

import (
	"errors"
	"math"
	"math/big"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/fingerprint"
)

// exactByRationals is the rule computed the slow, obvious way: the literal
// and the canonical form of its nearest double, as exact rationals.
func exactByRationals(lit string) (bool, error) {
	f, err := strconv.ParseFloat(lit, 64)
	if math.IsInf(f, 0) {
		return false, err
	}
	want, ok := new(big.Rat).SetString(lit)
	if !ok {
		return false, errors.New("big.Rat refuses " + lit)
	}
	got, _ := new(big.Rat).SetString(string(fingerprint.AppendNumber(nil, f)))
	return want.Cmp(got) == 0, nil
}

// randomLiteral writes a number of the JSON grammar with 1 to 25 significant
// digits, often near the places where the rule's shortcuts end: 15 and 17
// digits, 2^53, 1e21, the edges of the double range.
func randomLiteral(r *rand.Rand) string {
	var b strings.Builder
	if r.IntN(2) == 0 {
		b.WriteByte('-')
	}
	n := 1 + r.IntN(25)
	if r.IntN(2) == 0 {
		n = 14 + r.IntN(5)
	}
	b.WriteByte(byte('1' + r.IntN(9)))
	for range n - 1 {
		b.WriteByte(byte('0' + r.IntN(10)))
	}
	if r.IntN(5) == 0 {
		b.WriteString(strings.Repeat("0", r.IntN(4))) // trailing zeros
	}
	exps := []int{0, 0, 5, -5, 15, 21 - n, -300 - n, 300 - n, 308 - n, -308 - n, -324 - n, r.IntN(700) - 350}
	if e := exps[r.IntN(len(exps))]; e != 0 {
		b.WriteString("e" + strconv.Itoa(e))
	}
	return b.String()
}

// TestNumberRuleAgainstRationals checks Parse's verdict on many literals,
// fast path and exact comparison alike, against exactByRationals.
func TestNumberRuleAgainstRationals(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	counts := map[string]int{}
	for range 100_000 {
		lit := randomLiteral(r)
		exact, rangeErr := exactByRationals(lit)
		_, err := fingerprint.Parse([]byte(lit), fingerprint.Limits{})
		switch {
		case rangeErr != nil:
			counts["range"]++
			if !errors.Is(err, fingerprint.ErrNumberRange) {
				t.Fatalf("%s: %v, want ErrNumberRange", lit, err)
			}
		case exact:
			counts["exact"]++
			if err != nil {
				t.Fatalf("%s is exact, refused: %v", lit, err)
			}
		default:
			counts["inexact"]++
			if !errors.Is(err, fingerprint.ErrInexactNumber) {
				t.Fatalf("%s is inexact: %v", lit, err)
			}
		}
	}
	t.Log(counts)
	for _, k := range []string{"range", "exact", "inexact"} {
		if counts[k] < 500 {
			t.Errorf("only %d %s literals: the generator misses a case (%v)", counts[k], k, counts)
		}
	}
}
