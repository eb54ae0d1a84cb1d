// Package storetest is the conformance suite every ledger.Store passes. A
// store's own tests call Run with a Backend; the suite then drives the real
// database through every legal and illegal transition, lease expiry and
// fencing, retention, paging, races between goroutines and between store
// handles, and a property-based comparison with an in-memory model.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// Backend makes stores for the suite. The suite's subtests run in
// parallel: its functions are called from several goroutines at once.
type Backend struct {
	// Fresh returns an empty, migrated store of its own (its own schema or
	// file), closed when tb ends.
	Fresh func(tb testing.TB) ledger.Store
	// Another returns a second, independent handle on the same data as s:
	// a second pool, as a second gateway instance would have.
	Another func(tb testing.TB, s ledger.Store) ledger.Store
	// Commits counts the transactions the stores of this backend have
	// committed so far (where every statement autocommits, the statements
	// sent), so the suite can check the cost of the common path. Without
	// it, that test says it skips.
	Commits func() int64
	// Begin opens a caller's transaction on s's database, as a Go service
	// does around its business write, with s's steps bound to it; Rows
	// counts the committed business rows named id. Without them, the tests
	// of a caller's transaction say they skip.
	Begin func(tb testing.TB, s ledger.Store) Tx
	Rows  func(tb testing.TB, s ledger.Store, id string) int
}

// Run runs the whole suite. Its subtests run in parallel, each on a store
// of its own, except the few run alone, first, one at a time: one counts
// commits across stores, the others need a step done within tens of
// milliseconds.
func Run(t *testing.T, b Backend) {
	// The longest first, so that the others run beside it.
	t.Run("Model", inParallel(b, testModel))
	t.Run("Reserve", inParallel(b, testReserve))
	// Alone: it counts the commits of every store the backend opened.
	t.Run("TwoCommits", alone(b, testTwoCommits))
	t.Run("Validation", inParallel(b, testValidation))
	t.Run("LegalTransitions", inParallel(b, testLegalTransitions))
	t.Run("IllegalTransitions", inParallel(b, testIllegalTransitions))
	t.Run("OwnerRetry", inParallel(b, testOwnerRetry))
	t.Run("ReserveRetry", inParallel(b, testReserveRetry))
	t.Run("FingerprintMismatch", inParallel(b, testFingerprintMismatch))
	t.Run("FingerprintRules", inParallel(b, testFingerprintRules))
	t.Run("Tenants", inParallel(b, testTenants))
	t.Run("BusinessKey", inParallel(b, testBusinessKey))
	t.Run("ConcurrencyKey", inParallel(b, testConcurrencyKey))
	t.Run("StoredResponse", inParallel(b, testStoredResponse))
	t.Run("Leases", inParallel(b, testLeases))
	t.Run("Fencing", inParallel(b, testFencing))
	t.Run("ExpireLeases", inParallel(b, testExpireLeases))
	t.Run("CompleteAfterLapse", inParallel(b, testCompleteAfterLapse))
	t.Run("Retention", inParallel(b, testRetention))
	t.Run("List", inParallel(b, testList))
	t.Run("Lookups", inParallel(b, testLookups))
	t.Run("Usage", inParallel(b, testUsage))
	t.Run("RaceReserve", inParallel(b, testRaceReserve))
	t.Run("RaceTwoHandles", inParallel(b, testRaceTwoHandles))
	t.Run("RaceCompleteVsExpiry", inParallel(b, testRaceCompleteVsExpiry))
	runNamespaces(t, b)
	runApprovals(t, b)
	runAuditLog(t, b)
	t.Run("Stats", inParallel(b, testStats))
	t.Run("CommitStats", inParallel(b, testCommitStats))
	runProbes(t, b)
	runTx(t, b)
	runEffects(t, b)
}

// inParallel is a subtest run beside the others.
func inParallel(b Backend, test func(*testing.T, Backend)) func(*testing.T) {
	return func(t *testing.T) {
		t.Parallel()
		test(t, b)
	}
}

// alone is a subtest run by itself, before the parallel ones start.
func alone(b Backend, test func(*testing.T, Backend)) func(*testing.T) {
	return func(t *testing.T) { test(t, b) }
}

// Long is a lease no test outlives; Lapsing is one that has lapsed by the
// store's next statement.
const (
	Long      = time.Hour
	Lapsing   = time.Microsecond
	Retention = 24 * time.Hour
)

var seq atomic.Int64

// Params returns reserve parameters for a fresh key in tenant "acme".
func Params(lease time.Duration) ledger.ReserveParams {
	n := seq.Add(1)
	return ledger.ReserveParams{
		Tenant: "acme", Namespace: ledger.NamespaceClients, Key: fmt.Sprintf("key-%d", n), Kind: ledger.KindRoute,
		Route:       "/v1/tickets",
		Fingerprint: "sha256:aaaa", Lease: lease, Retention: Retention, Actor: "test-gateway",
	}
}

// clientKey is the identity of a tenant's key in its clients' namespace.
func clientKey(tenant, key string) ledger.OpKey {
	return ledger.OpKey{Tenant: tenant, Namespace: ledger.NamespaceClients, Key: key}
}

// ctx returns a context for one call of a test (or of a rapid check).
func ctx(tb interface{ Cleanup(func()) }) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	tb.Cleanup(cancel)
	return c
}

// Reserved reserves a fresh key with a lease and fails the test unless the
// store created it: a store's own tests use it to prove it still works.
func Reserved(tb testing.TB, s ledger.Store) ledger.Reservation {
	tb.Helper()
	return reserve(tb, s, Params(time.Minute))
}

// reserve reserves p and fails the test unless this call created it.
func reserve(tb testing.TB, s ledger.Store, p ledger.ReserveParams) ledger.Reservation {
	tb.Helper()
	r, err := s.Reserve(ctx(tb), p)
	if err != nil {
		tb.Fatalf("reserve: %v", err)
	}
	if !r.Created {
		tb.Fatalf("reserve %s: not created", p.Key)
	}
	return r
}

// reach creates an operation and walks it to state, returning it and the
// last lease taken on it (zero for a plain reservation).
func reach(tb testing.TB, s ledger.Store, state ledger.State) (*ledger.Operation, ledger.Lease) {
	tb.Helper()
	c := ctx(tb)
	if state == ledger.Prepared {
		r := reserve(tb, s, Params(0))
		return r.Op, ledger.Lease{OpID: r.Op.ID, Token: "none", Fence: r.Op.Fence, Actor: "test"}
	}
	r := reserve(tb, s, Params(Long))
	l := *r.Lease
	var op *ledger.Operation
	var err error
	switch state {
	case ledger.Executing:
		return r.Op, l
	case ledger.Succeeded, ledger.Failed:
		op, err = s.Complete(c, l, ledger.Outcome{State: state, Response: &ledger.Response{Status: 201}})
	case ledger.Unknown:
		op, err = s.MarkUnknown(c, l, ledger.Note{Reason: "timeout", ErrorCode: "upstream_timeout"})
	default:
		tb.Fatalf("reach: bad state %q", state)
	}
	if err != nil {
		tb.Fatalf("reach %s: %v", state, err)
	}
	return op, l
}

func get(tb testing.TB, s ledger.Store, id string) *ledger.Operation {
	tb.Helper()
	op, err := s.Get(ctx(tb), id)
	if err != nil {
		tb.Fatalf("get %s: %v", id, err)
	}
	return op
}

func history(tb testing.TB, s ledger.Store, id string) []ledger.Event {
	tb.Helper()
	h, err := s.History(ctx(tb), id)
	if err != nil {
		tb.Fatalf("history %s: %v", id, err)
	}
	return h
}

// wantErr fails unless err is each of kinds.
func wantErr(tb testing.TB, what string, err error, kinds ...error) {
	tb.Helper()
	if err == nil {
		tb.Fatalf("%s: no error, want %v", what, kinds)
	}
	for _, k := range kinds {
		if !errors.Is(err, k) {
			tb.Fatalf("%s: error %q is not %q", what, err, k)
		}
	}
}

// states lists the states of ops, for messages.
func states(ops []*ledger.Operation) []ledger.State {
	out := make([]ledger.State, len(ops))
	for i, op := range ops {
		out[i] = op.State
	}
	return out
}

func ids(ops []*ledger.Operation) []string {
	out := make([]string, len(ops))
	for i, op := range ops {
		out[i] = op.ID
	}
	return slices.Clone(out)
}
