package storetest

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// testFingerprintRules: the rules an operation's fingerprint was made
// under are kept with it, as written, on every way a reservation is made
// (with a lease, alone or among concurrent ones that a store may merge into
// one statement, and waiting for an approval), and read back by every read;
// none written reads back as none; rules over their bound are refused,
// nothing reserved.
func testFingerprintRules(t *testing.T, b Backend) {
	s := b.Fresh(t)
	const rules = `{"headers":["X-Dry-Run"],"ignore":["/client_time"]}`
	check := func(what string, op *ledger.Operation, want string) {
		t.Helper()
		if op.FingerprintRules != want {
			t.Fatalf("%s: rules %q, want %q", what, op.FingerprintRules, want)
		}
		for how, read := range map[string]func() (*ledger.Operation, error){
			"get":        func() (*ledger.Operation, error) { return s.Get(ctx(t), op.ID) },
			"get by key": func() (*ledger.Operation, error) { return s.GetByKey(ctx(t), op.OpKey()) },
		} {
			got, err := read()
			if err != nil || got.FingerprintRules != want {
				t.Fatalf("%s, read by %s: %+v %v", what, how, got, err)
			}
		}
	}
	p := Params(Long)
	p.FingerprintRules = rules
	check("reserved with a lease", reserve(t, s, p).Op, rules)
	check("reserved with none", reserve(t, s, Params(Long)).Op, "")
	a := ApprovalParams(time.Hour, time.Hour)
	a.FingerprintRules = rules
	check("reserved for an approval", reserve(t, s, a).Op, rules)

	var wg sync.WaitGroup
	ops := make([]*ledger.Operation, 16)
	for i := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := Params(Long)
			p.FingerprintRules = rules
			ops[i] = reserve(t, s, p).Op
		}()
	}
	wg.Wait()
	for _, op := range ops {
		check("reserved among others", op, rules)
	}

	p = Params(Long)
	p.FingerprintRules = strings.Repeat("r", ledger.MaxFingerprintRules+1)
	_, err := s.Reserve(ctx(t), p)
	wantErr(t, "rules over their bound", err, ledger.ErrInvalid)
	if _, err := s.GetByKey(ctx(t), p.OpKey()); err == nil {
		t.Fatal("rules over their bound reserved the key")
	}
}
