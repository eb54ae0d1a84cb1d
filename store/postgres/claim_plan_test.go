package postgres

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// TestClaimWalksTheDueIndex: with a backlog enqueued faster than the
// table is analysed, a claim still walks idem_effects_due in order and
// stops at its limit, instead of gathering, checking and sorting every
// due effect to claim a few (a cost that grew with the backlog: the
// relay on PostgreSQL delivered a fraction of what it does now, 13 ms
// a claim at 2,000 due). The claim's pipeline turns the other plans off,
// and under those settings the plan walks the index.
func TestClaimWalksTheDueIndex(t *testing.T) {
	c := context.Background()
	dsn, _ := testenv.PostgresSchema(t)
	var sent batchLog
	s, _ := testStoreAt(t, dsn, Options{Tracer: &sent})
	var backlog []ledger.EffectParams
	for i := range 600 {
		backlog = append(backlog, ledger.EffectParams{Tenant: "acme", OperationKey: fmt.Sprint("op-", i), Name: "step",
			Target: "crm", Path: "/v1/steps/1", Header: map[string][]string{"Content-Type": {"application/json"}},
			Body: []byte(`{"step":1}`)})
		if len(backlog) == 256 || i == 1999 {
			if _, err := s.Enqueue(c, backlog); err != nil {
				t.Fatal(err)
			}
			backlog = backlog[:0]
		}
	}
	if _, err := s.ClaimEffects(c, ledger.EffectClaimParams{Targets: []string{"crm"}, Limit: 16,
		Lease: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, setting := range []string{"enable_bitmapscan", "enable_sort", "enable_seqscan"} {
		if !sent.has(setting) {
			t.Errorf("the claim's pipeline does not turn %s off", setting)
		}
	}
	plan := ""
	err := pgx.BeginFunc(c, s.pool, func(tx pgx.Tx) error {
		for _, setting := range claimPlan {
			if _, err := tx.Exec(c, "SELECT set_config($1, 'off', true)", setting); err != nil {
				return err
			}
		}
		rows, err := tx.Query(c, "EXPLAIN "+claimEffectsSQL, "t:", int64(30e6), []string{"crm"}, 16)
		if err != nil {
			return err
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		plan = strings.Join(lines, "\n")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(plan, "Index Scan using idem_effects_due") || strings.Contains(plan, "Sort") {
		t.Fatalf("the claim does not walk the due index in order:\n%s", plan)
	}
}

// TestTurnLooksEffectsUpByID: a relay's turn turns sequential scans off
// before its results statement, not only before its claim: the merged
// statement's plan is cached, and one made while the table was small
// (planned with sequential scans) joined every later turn's results to
// the whole table. The relay on PostgreSQL delivered less with turns
// than without, until the settings came first.
func TestTurnLooksEffectsUpByID(t *testing.T) {
	c := context.Background()
	dsn, _ := testenv.PostgresSchema(t)
	var sent batchLog
	s, _ := testStoreAt(t, dsn, Options{Tracer: &sent})
	if _, err := s.Enqueue(c, []ledger.EffectParams{{Tenant: "acme", OperationKey: "op-1", Name: "step",
		Target: "crm", Path: "/v1/steps/1", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	claim := ledger.EffectClaimParams{Targets: []string{"crm"}, Limit: 16, Lease: time.Minute}
	cs, err := s.ClaimEffects(c, claim)
	if err != nil || len(cs) != 1 {
		t.Fatalf("claim: %v %v", cs, err)
	}
	sent.reset()
	turn, err := s.SettleEffects(c, ledger.EffectSettle{Claim: claim, Results: []ledger.EffectResult{{Lease: cs[0].Lease,
		Outcome: ledger.EffectOutcome{State: ledger.Succeeded, Status: 201}}}})
	if err != nil || turn.Recorded[0] != nil {
		t.Fatalf("turn: %+v %v", turn, err)
	}
	if !sent.before("enable_seqscan", "FROM unnest") {
		t.Fatalf("the turn's results statement runs before sequential scans are off: %q", sent.sqls)
	}
}

// batchLog keeps the arguments of the statements sent in batches.
type batchLog struct {
	mu   sync.Mutex
	args []string
	sqls []string // each statement, with its first argument
}

func (l *batchLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (l *batchLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (l *batchLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}
func (l *batchLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (l *batchLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range d.Args {
		l.args = append(l.args, fmt.Sprint(a))
	}
	first := ""
	if len(d.Args) > 0 {
		first = fmt.Sprint(d.Args[0])
	}
	l.sqls = append(l.sqls, d.SQL+" "+first)
}

func (l *batchLog) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.args, l.sqls = nil, nil
}

// before reports whether a statement holding a was sent before the first
// one holding b.
func (l *batchLog) before(a, b string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	at := slices.IndexFunc(l.sqls, func(s string) bool { return strings.Contains(s, a) })
	bt := slices.IndexFunc(l.sqls, func(s string) bool { return strings.Contains(s, b) })
	return at >= 0 && bt >= 0 && at < bt
}

func (l *batchLog) has(arg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.args, arg)
}
