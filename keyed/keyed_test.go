package keyed_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// counter is an effect that counts its runs and answers what answer says.
type counter struct {
	runs   atomic.Int64
	answer func(n int64) (keyed.Outcome, error)
}

func (c *counter) effect(ctx context.Context, run *keyed.Run) (keyed.Outcome, error) {
	n := c.runs.Add(1)
	if c.answer != nil {
		return c.answer(n)
	}
	return ok(fmt.Sprintf(`{"n":%d}`, n)), nil
}

func ok(body string) keyed.Outcome {
	return keyed.Outcome{Fate: contract.FateSucceeded, Code: "test_ok", Answer: &ledger.Response{Status: 200,
		Header: map[string][]string{"Content-Type": {"application/json"}}, Body: []byte(body)}}
}

var policy = &keyed.Policy{Name: "test:write", Kind: ledger.KindRoute, Lease: 10 * time.Second}

func command(key string) *keyed.Command {
	return &keyed.Command{Policy: policy, Tenant: "acme", Namespace: ledger.NamespaceClients, Key: key,
		Fingerprint: "sha256:" + strings.Repeat("a", 64), Target: "TEST"}
}

func executor(t *testing.T, s keyed.Store) *keyed.Executor {
	t.Helper()
	x, err := keyed.New(keyed.Options{Store: s, RecordDeadline: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// Fifty concurrent copies of one command make one effect, and every copy
// that waits is given its answer, byte for byte.
func TestStormOfCopiesWaitsForOneEffect(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		x, c := executor(t, db.Open(t)), &counter{}
		var wg sync.WaitGroup
		results := make([]keyed.Result, 50)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cmd := command("storm-1")
				cmd.Wait = time.Minute
				res, err := x.Execute(context.Background(), cmd, c.effect)
				if err != nil {
					t.Error(err)
				}
				results[i] = res
			}()
		}
		wg.Wait()
		if n := c.runs.Load(); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
		ran := 0
		for _, r := range results {
			if r.Ran {
				ran++
			}
			if r.Problem != nil || r.Answer == nil || string(r.Answer.Body) != `{"n":1}` {
				t.Fatalf("a copy got %+v", r)
			}
		}
		if ran != 1 {
			t.Fatalf("%d copies ran, want 1", ran)
		}
	})
}

// The one rule of an effect without an answer: nothing sent is released
// and its retry runs it; sent is unknown and never run again; a timeout
// says so.
func TestEffectWithoutAnAnswer(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		x := executor(t, db.Open(t))
		refused := &counter{answer: func(n int64) (keyed.Outcome, error) {
			if n == 1 {
				return keyed.Outcome{}, contract.NotSent("upstream", errors.New("connection refused"))
			}
			return ok(`{"second":true}`), nil
		}}
		res := mustExecute(t, x, command("not-sent"), refused.effect)
		if res.State != ledger.Prepared || res.Problem == nil || res.Problem.Code != contract.CodeUpstreamUnavailable {
			t.Fatalf("not sent: %+v", res)
		}
		res = mustExecute(t, x, command("not-sent"), refused.effect)
		if !res.Ran || res.State != ledger.Succeeded || refused.runs.Load() != 2 {
			t.Fatalf("the retry of a release: %+v after %d runs", res, refused.runs.Load())
		}
		for name, cause := range map[string]error{"reset": errors.New("connection reset"),
			"timeout": context.DeadlineExceeded} {
			lost := &counter{answer: func(int64) (keyed.Outcome, error) {
				return keyed.Outcome{}, contract.NoAnswer("upstream", cause)
			}}
			res = mustExecute(t, x, command("lost-"+name), lost.effect)
			want := 502
			if name == "timeout" {
				want = 504
			}
			if res.State != ledger.Unknown || res.Problem == nil || res.Problem.Status != want {
				t.Fatalf("%s: %+v", name, res)
			}
			res = mustExecute(t, x, command("lost-"+name), lost.effect)
			if res.Problem == nil || res.Problem.Code != contract.CodeOutcomeUnknown || lost.runs.Load() != 1 {
				t.Fatalf("%s: the retry of an unknown: %+v after %d runs", name, res, lost.runs.Load())
			}
		}
	})
}

// An answer over the policy's bound is given whole to the command that
// ran it, the operation is final, and every retry is given a stand-in
// that names the answer by its size and digest.
func TestAnswerTooLargeToKeep(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		x := executor(t, db.Open(t))
		big := strings.Repeat("x", 4096)
		c := &counter{answer: func(int64) (keyed.Outcome, error) { return ok(`"` + big + `"`), nil }}
		cmd := command("big-1")
		cmd.Policy = &keyed.Policy{Name: "test:big", Kind: ledger.KindRoute, MaxAnswer: 1024}
		res := mustExecute(t, x, cmd, c.effect)
		if !res.Ran || !res.NotStored || res.State != ledger.Succeeded || len(res.Answer.Body) != len(big)+2 {
			t.Fatalf("the first: %+v", res)
		}
		res = mustExecute(t, x, cmd, c.effect)
		if !res.Replayed || !keyed.NotKept(res.Answer) || res.Answer.Status != 200 || c.runs.Load() != 1 {
			t.Fatalf("the retry: %+v", res)
		}
		var nk contract.NotKept
		sum := sha256.Sum256([]byte(`"` + big + `"`))
		if err := json.Unmarshal(res.Answer.Body, &nk); err != nil || nk.Size != int64(len(big)+2) ||
			nk.SHA256 != hex.EncodeToString(sum[:]) || nk.Limit != 1024 {
			t.Fatalf("the stand-in %s: %v", res.Answer.Body, err)
		}
	})
}

// lossy is a store whose reservations commit and then lose their reply
// while it is away: a connection cut after the INSERT was sent.
type lossy struct {
	keyed.Store
	away atomic.Bool
}

func (l *lossy) Reserve(ctx context.Context, p ledger.ReserveParams) (ledger.Reservation, error) {
	if !l.away.Load() {
		return l.Store.Reserve(ctx, p)
	}
	_, _ = l.Store.Reserve(ctx, p) // it lands; the reply does not
	return ledger.Reservation{}, fmt.Errorf("reserve: %w: %w", ledger.ErrUnavailable, ledger.ErrReplyLost)
}

// A reservation whose commit landed and whose reply was lost is told
// store_unavailable, nothing sent; once the store answers again it is
// released in the background, and the retry runs it once, instead of
// finding it executing under a lease nobody holds, then unknown.
func TestReservationWhoseReplyWasLost(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		s := db.Open(t)
		l := &lossy{Store: s}
		l.away.Store(true)
		x, c := executor(t, l), &counter{}
		res := mustExecute(t, x, command("lost-reply"), c.effect)
		if res.Problem == nil || res.Problem.Code != contract.CodeStoreUnavailable || c.runs.Load() != 0 {
			t.Fatalf("while the replies are lost: %+v", res)
		}
		l.away.Store(false)
		op := waitFor(t, s, "lost-reply", func(op *ledger.Operation) bool { return op.State == ledger.Prepared })
		if op.Attempts != 1 {
			t.Fatalf("released after %d attempts", op.Attempts)
		}
		res = mustExecute(t, x, command("lost-reply"), c.effect)
		if !res.Ran || res.State != ledger.Succeeded || c.runs.Load() != 1 {
			t.Fatalf("the retry: %+v after %d runs", res, c.runs.Load())
		}
	})
}

func mustExecute(t *testing.T, x *keyed.Executor, cmd *keyed.Command, e keyed.Effect) keyed.Result {
	t.Helper()
	res, err := x.Execute(context.Background(), cmd, e)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// waitFor reads key's operation until it satisfies ok: the event, not a
// time, is what the test waits for (the bound only fails a test that
// would otherwise hang).
func waitFor(t *testing.T, s keyed.Store, key string, ok func(*ledger.Operation) bool) *ledger.Operation {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		op, err := s.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients, Key: key})
		if err == nil && ok(op) {
			return op
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %+v, %v", key, op, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
