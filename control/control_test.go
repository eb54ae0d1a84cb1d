package control_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control"
	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// The principals of the tests: X-Who names one.
var principals = map[string]approval.Principal{
	"agent":    {Name: "agent", Tenant: "acme", Roles: []string{"agent"}},
	"alice":    {Name: "alice", Tenant: "acme", Roles: []string{"admin", "approver"}},
	"bob":      {Name: "bob", Tenant: "acme", Roles: []string{"approver"}},
	"mallory":  {Name: "mallory", Tenant: "globex", Roles: []string{"admin", "approver"}},
	"operator": {Name: "operator", Tenant: "acme", Roles: []string{"ops"}},
}

// fixture is the control API on a real store, and what its hooks heard.
type fixture struct {
	t        *testing.T
	store    ledger.Store
	srv      *httptest.Server
	woken    []string
	resolved []bool // each resolution's duplicate flag
}

func newFixture(t *testing.T, s ledger.Store, adminRole string) *fixture {
	fx := &fixture{t: t, store: s}
	op := &control.Operator{Store: s, AdminRole: adminRole, Wake: func(id string) { fx.woken = append(fx.woken, id) },
		Resolved: func(before, after *ledger.Operation, dup bool) { fx.resolved = append(fx.resolved, dup) }}
	api, err := control.New(control.Options{Operator: op, Caller: func(r *http.Request) (approval.Principal, bool) {
		p, ok := principals[r.Header.Get("X-Who")]
		return p, ok
	}})
	if err != nil {
		t.Fatal(err)
	}
	fx.srv = httptest.NewServer(api)
	t.Cleanup(fx.srv.Close)
	return fx
}

// as is a typed client acting as who.
func (fx *fixture) as(who string) *client.Client {
	c, err := client.New(fx.srv.URL, "token-of-"+who, client.WithHeader("X-Who", who))
	if err != nil {
		fx.t.Fatal(err)
	}
	return c
}

// unknown makes an operation of tenant whose outcome is unknown.
func (fx *fixture) unknown(tenant, key string) *ledger.Operation {
	fx.t.Helper()
	ctx := context.Background()
	res, err := fx.store.Reserve(ctx, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: tenant, Key: key, Route: "POST /v1/charges",
		Fingerprint: "sha256:" + strings.Repeat("a", 64), Lease: time.Minute, Retention: time.Hour, Actor: "test"})
	if err != nil {
		fx.t.Fatal(err)
	}
	op, err := fx.store.MarkUnknown(ctx, *res.Lease, ledger.Note{Reason: "answer lost", ErrorCode: "http_502"})
	if err != nil {
		fx.t.Fatal(err)
	}
	return op
}

func code(err error) string {
	var p *contract.Problem
	if errors.As(err, &p) {
		return p.Code
	}
	return ""
}

// TestResolveIsTheOperatorsAlone: only an admin of the operation's tenant
// resolves it; a refused resolution changes nothing and wakes nobody; a
// resolution wakes the waiting requests, is counted with its duplicate
// finding, and keeps that finding in the history; a second one is refused
// naming the state that refused it.
func TestResolveIsTheOperatorsAlone(t *testing.T) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		fx := newFixture(t, db.Open(t), "")
		op := fx.unknown("acme", "charge-1")
		ctx := context.Background()
		good := contract.ResolveRequest{State: "succeeded", Note: "the bank shows it once", Duplicate: true}
		for who, want := range map[string]string{"operator": contract.CodeForbidden, "bob": contract.CodeForbidden,
			"mallory": contract.CodeNotFound} {
			if _, err := fx.as(who).Resolve(ctx, op.ID, good); code(err) != want {
				t.Errorf("%s resolves: %v, want %s", who, err, want)
			}
		}
		for name, bad := range map[string]contract.ResolveRequest{
			"no note":              {State: "succeeded"},
			"executing":            {State: "executing", Note: "x"},
			"an answer, prepared":  {State: "prepared", Note: "x", Response: &contract.Answer{Status: 200}},
			"an answer of 99":      {State: "succeeded", Note: "x", Response: &contract.Answer{Status: 99}},
			"a note of 2001 chars": {State: "failed", Note: strings.Repeat("n", control.MaxNote+1)},
		} {
			if _, err := fx.as("alice").Resolve(ctx, op.ID, bad); code(err) != contract.CodeInvalidCommand {
				t.Errorf("%s: %v, want invalid_command", name, err)
			}
		}
		if now, _ := fx.store.Get(ctx, op.ID); now.State != ledger.Unknown || len(fx.woken) != 0 || len(fx.resolved) != 0 {
			t.Fatalf("refusals changed something: %s, woke %v, counted %v", now.State, fx.woken, fx.resolved)
		}
		v, err := fx.as("alice").Resolve(ctx, op.ID, good)
		if err != nil || v.State != ledger.Succeeded || v.History[len(v.History)-1].Reason != "duplicate: the bank shows it once" ||
			v.History[len(v.History)-1].Actor != "alice" {
			t.Fatalf("resolve: %+v %v", v, err)
		}
		if len(fx.woken) != 1 || fx.woken[0] != op.ID || len(fx.resolved) != 1 || !fx.resolved[0] {
			t.Fatalf("woke %v, counted %v", fx.woken, fx.resolved)
		}
		_, err = fx.as("alice").Resolve(ctx, op.ID, good)
		var p *contract.Problem
		if !errors.As(err, &p) || p.Code != contract.CodeIllegalTransition || p.State != ledger.Succeeded ||
			!strings.Contains(p.Detail, "this one is succeeded") || p.StatusURL != contract.ControlPrefix+"/operations/"+op.ID {
			t.Fatalf("a second resolution: %v %+v", err, p)
		}
	})
}

// TestAdminRoleIsOneSetting: the role that resolves is the Operator's one
// setting, for every action that needs it (resolve, export, effects).
func TestAdminRoleIsOneSetting(t *testing.T) {
	fx := newFixture(t, dbtest.SQLite(t), "ops")
	op := fx.unknown("acme", "charge-ops")
	ctx := context.Background()
	if _, err := fx.as("alice").Resolve(ctx, op.ID, contract.ResolveRequest{State: "failed", Note: "x"}); code(err) !=
		contract.CodeForbidden || !strings.Contains(err.Error(), "needs the ops role") {
		t.Fatalf("the default admin under another setting: %v", err)
	}
	if _, err := fx.as("alice").Export(ctx, &strings.Builder{}); code(err) != contract.CodeForbidden {
		t.Fatalf("export: %v", err)
	}
	if _, err := fx.as("operator").Resolve(ctx, op.ID, contract.ResolveRequest{State: "failed", Note: "x"}); err != nil {
		t.Fatalf("the ops role: %v", err)
	}
}

// TestLocalOperator: the CLI's operator, at the store, resolves in any
// tenant, and still needs a note.
func TestLocalOperator(t *testing.T) {
	s := dbtest.SQLite(t)
	fx := newFixture(t, s, "")
	op := fx.unknown("globex", "charge-local")
	o := &control.Operator{Store: s}
	ctx := context.Background()
	if _, err := o.Resolve(ctx, control.Local("operator:root"), control.Resolution{OperationID: op.ID, State: "prepared"}); code(err) !=
		contract.CodeInvalidCommand {
		t.Fatalf("without a note: %v", err)
	}
	done, err := o.Resolve(ctx, control.Local("operator:root"), control.Resolution{OperationID: op.ID, State: "prepared",
		Note: "the bank never saw it"})
	if err != nil || done.State != ledger.Prepared {
		t.Fatalf("local resolve: %v %v", done, err)
	}
	if _, err := o.Resolve(ctx, control.Of(principals["alice"]), control.Resolution{OperationID: op.ID, State: "failed",
		Note: "x"}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("acme's admin resolved globex's operation: %v", err)
	}
}

func httptestServer(t *testing.T, h http.Handler) string {
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func errorsAs[T error](err error, target *T) bool { return errors.As(err, target) }
