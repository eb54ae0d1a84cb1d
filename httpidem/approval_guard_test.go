package httpidem_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/ledger"
)

// The ways around an approval an adversarial review found, each closed.

// TestKeylessNeverBypassesApproval: a route that asks for approvals needs a
// key on every request (a keyless one would pass unrecorded), and cannot
// be configured without.
func TestKeylessNeverBypassesApproval(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newDeployApp(t, s, prodPolicy)
		if r := a.deploy("", prod); r.status != 400 || problemCode(t, r) != contract.CodeMissingKey || a.effects.Load() != 0 {
			t.Fatalf("keyless production deploy: %d %s, %d effects", r.status, r.body, a.effects.Load())
		}
		pol, _ := approval.Compile(prodPolicy)
		_, err := httpidem.New(httpidem.Options{Store: s, Tenant: func(*http.Request) (string, error) { return "acme", nil },
			Principal: func(*http.Request) (approval.Principal, error) { return approval.Principal{}, nil },
			Routes:    []httpidem.Route{{Method: "PUT", Pattern: "/v1/x", Approval: pol, RequireKey: new(bool)}}})
		if err == nil || !strings.Contains(err.Error(), "key") {
			t.Fatalf("an approval route without keys: %v", err)
		}
	})
}

// TestMistypedFieldNeverBypassesApproval: a field the policy compares with
// a string, sent as a list (every field of a form body is one) or a
// number, is refused, not taken for "not production".
func TestMistypedFieldNeverBypassesApproval(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		a := newDeployApp(t, s, prodPolicy)
		for key, body := range map[string]string{
			"list":   `{"artifact":"api@sha256:aaaa","environment":["production"]}`,
			"number": `{"artifact":"api@sha256:aaaa","environment":1}`,
		} {
			if r := a.deploy(key, body); r.status != 422 || !strings.Contains(r.body, "refused") {
				t.Fatalf("%s: %d %s", key, r.status, r.body)
			}
		}
		form := a.deploy("form", "artifact=api%40sha256%3Aaaaa&environment=production",
			"Content-Type", "application/x-www-form-urlencoded")
		if form.status != 422 || a.effects.Load() != 0 {
			t.Fatalf("a form body: %d %s, %d effects", form.status, form.body, a.effects.Load())
		}
		for _, key := range []string{"list", "number", "form"} {
			if _, err := s.GetByKey(t.Context(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
				Key: key}); err == nil {
				t.Fatalf("%s was reserved", key)
			}
		}
	})
}

// TestRequesterStaysRequesterAfterReopen: an approval reopened by another
// principal's retry still names the requester, who still cannot approve.
// The retry goes through a middleware whose approvals last an hour, so
// that the decision finds the reopened one pending however slow the
// machine.
func TestRequesterStaysRequesterAfterReopen(t *testing.T) {
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		cfg := prodPolicy
		cfg.TTL = 300 * time.Millisecond
		const carol = "carol:acme:agent,approver"
		first := accepted(t, newDeployApp(t, s, cfg).do("POST", "/v1/services/api/deployments", carol, "dep-c", prod))
		a := newDeployApp(t, s, prodPolicy)
		time.Sleep(time.Until(first.Approval.ExpiresAt) + 20*time.Millisecond)
		again := accepted(t, a.deploy("dep-c", prod)) // bot's retry of carol's operation
		if again.Code != contract.CodeApprovalExpired || again.Approval.Summary != first.Approval.Summary {
			t.Fatalf("reopened: %+v", again)
		}
		if r := a.decide("approve", carol, again.Approval.ID, ""); r.status != 403 {
			t.Fatalf("the requester approved the reopened approval: %d %s", r.status, r.body)
		}
		if got, err := s.GetApproval(t.Context(), again.Approval.ID); err != nil || got.RequestedBy != "carol" {
			t.Fatalf("reopened approval: %+v %v", got, err)
		}
	})
}

// refusing stands for a store whose clock is behind this process's: once
// behind is set, the approvals it returns have lapsed by this process's
// clock (their expiry an hour back), while it refuses to reopen them.
type refusing struct {
	ledger.Store
	calls  atomic.Int64
	behind atomic.Bool
}

// lapsed is op as this process's clock, ahead, reads it.
func (s *refusing) lapsed(op *ledger.Operation) *ledger.Operation {
	if op != nil && op.Approval != nil && s.behind.Load() {
		ref := *op.Approval
		ref.ExpiresAt = time.Now().Add(-time.Hour)
		op.Approval = &ref
	}
	return op
}

func (s *refusing) Reserve(ctx context.Context, p ledger.ReserveParams) (ledger.Reservation, error) {
	res, err := s.Store.Reserve(ctx, p)
	res.Op = s.lapsed(res.Op)
	return res, err
}

func (s *refusing) GetByKey(ctx context.Context, k ledger.OpKey) (*ledger.Operation, error) {
	op, err := s.Store.GetByKey(ctx, k)
	return s.lapsed(op), err
}

func (s *refusing) Get(ctx context.Context, id string) (*ledger.Operation, error) {
	op, err := s.Store.Get(ctx, id)
	return s.lapsed(op), err
}

func (s *refusing) ReopenApproval(ctx context.Context, p ledger.ReopenParams) (*ledger.Operation, error) {
	s.calls.Add(1)
	op, err := s.Get(ctx, p.OpID)
	if err != nil {
		return nil, err
	}
	return op, fmt.Errorf("reopen: %w", ledger.ErrIllegalTransition)
}

// TestReopenOncePerRequest: when the clocks disagree, a retry tries one
// reopening and answers 202; it never loops. The approval lasts an hour by
// the store's clock, so that no pause of a loaded machine lapses it early.
func TestReopenOncePerRequest(t *testing.T) {
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		st := &refusing{Store: s}
		a := newDeployApp(t, st, prodPolicy)
		accepted(t, a.deploy("dep-s", prod))
		if n := st.calls.Load(); n != 0 {
			t.Fatalf("a new approval reopened %d times", n)
		}
		st.behind.Store(true)
		r := a.deploy("dep-s", prod)
		if n := st.calls.Load(); n != 1 || r.status != 202 {
			t.Fatalf("one retry: %d reopenings, answered %d %s", n, r.status, r.body)
		}
	})
}

// TestLapsedApprovalFreesItsGroupWithoutASweep: a Go service that runs no
// sweep still finds an environment free once its approval lapsed.
func TestLapsedApprovalFreesItsGroupWithoutASweep(t *testing.T) {
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		cfg := prodPolicy
		cfg.TTL = 200 * time.Millisecond
		a := newDeployApp(t, s, cfg)
		acc := accepted(t, a.deploy("dep-a", prod))
		time.Sleep(time.Until(acc.Approval.ExpiresAt) + 50*time.Millisecond)
		accepted(t, a.deploy("dep-b", `{"artifact":"api@sha256:bbbb","environment":"production"}`))
		if got, err := s.GetApproval(t.Context(), acc.Approval.ID); err != nil || got.Status != ledger.ApprovalExpired {
			t.Fatalf("the lapsed approval: %+v %v", got, err)
		}
	})
}
