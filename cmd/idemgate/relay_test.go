package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/outbox"
	"github.com/idemgate/idemgate/store/sqlite"
)

// relayFixture is a store a Go service filled, a target, and a relay
// configuration without routes.
type relayFixture struct {
	dsn, config string
	store       *sqlite.Store
	mu          sync.Mutex
	seen        []http.Header
	status      int
}

func newRelayFixture(t *testing.T) *relayFixture {
	f := &relayFixture{status: 201}
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.seen = append(f.seen, r.Header.Clone())
		w.WriteHeader(f.status)
		fmt.Fprint(w, `{"id":"crm-1"}`)
	}))
	t.Cleanup(target.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "outbox.db")
	f.dsn, f.config = "sqlite:"+path, filepath.Join(dir, "relay.yaml")
	text := fmt.Sprintf("store: %s\nupstreams:\n  crm: {url: %s, timeout: 2s, headers: {Authorization: \"Bearer crm-secret\"}}\n",
		f.dsn, target.URL)
	if err := os.WriteFile(f.config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	f.store = dbtest.SQLiteAt(t, path)
	return f
}

func (f *relayFixture) enqueue(t *testing.T, opKey string, names ...string) {
	var es []outbox.Effect
	for _, n := range names {
		es = append(es, outbox.Effect{Tenant: "acme", OperationKey: opKey, Name: n, Target: "crm", Path: "/v1/notes",
			Body: []byte(`{"n":"` + n + `"}`)})
	}
	if _, err := outbox.Enqueue(context.Background(), f.store, es...); err != nil {
		t.Fatal(err)
	}
}

func (f *relayFixture) effects(t *testing.T, opKey string) []contract.EffectView {
	r := run(t, "", "effects", "list", opKey, "--tenant", "acme", "--store", f.dsn, "--json")
	var out []contract.EffectView
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
		t.Fatalf("effects list: %+v", r)
	}
	return out
}

// TestRelayCommand: `idemgate relay --once` delivers what a Go service
// enqueued, in order, with the derived key and the configuration's
// credentials; `idemgate effects list` shows it.
func TestRelayCommand(t *testing.T) {
	t.Parallel()
	f := newRelayFixture(t)
	f.enqueue(t, "dossier_42:v5", "make-pdf", "send-link")
	r := run(t, "", "relay", "--config", f.config, "--once")
	if r.code != 0 || !strings.Contains(r.stdout, "delivered 2 effect(s): 2 succeeded") {
		t.Fatalf("relay: %+v", r)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) != 2 || f.seen[0].Get("Idempotency-Key") != "acme:dossier_42:v5/make-pdf" ||
		f.seen[1].Get("Idempotency-Key") != "acme:dossier_42:v5/send-link" ||
		f.seen[0].Get("Authorization") != "Bearer crm-secret" {
		t.Fatalf("deliveries: %v", f.seen)
	}
	for _, e := range f.effects(t, "dossier_42:v5") {
		if e.State != ledger.Succeeded || e.Attempts != 1 || e.Status != 201 {
			t.Fatalf("effect %+v", e)
		}
	}
	table := run(t, "", "effects", "list", "dossier_42:v5", "--tenant", "acme", "--store", f.dsn)
	if table.code != 0 || !strings.Contains(table.stdout, "make-pdf") || strings.Contains(table.stdout, "crm-secret") {
		t.Fatalf("effects table: %+v", table)
	}
	// The operation the effects belong to shows them in its view.
	res, err := f.store.Reserve(context.Background(), ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: "dossier_42:v5",
		Route: "POST /v1/dossiers", Fingerprint: "sha256:ab", Retention: time.Hour, Actor: "test"})
	if err != nil {
		t.Fatal(err)
	}
	show := run(t, "", "ops", "show", res.Op.ID, "--store", f.dsn, "--json")
	var v contract.View
	if show.code != 0 || json.Unmarshal([]byte(show.stdout), &v) != nil || len(v.Effects) != 2 ||
		v.Effects[1].Name != "send-link" || v.Effects[1].State != ledger.Succeeded {
		t.Fatalf("ops show: %+v", show)
	}
	if text := run(t, "", "ops", "show", res.Op.ID, "--store", f.dsn); !strings.Contains(text.stdout, "effects:") ||
		!strings.Contains(text.stdout, "send-link") {
		t.Fatalf("ops show, text: %+v", text)
	}
}

// TestEffectsResolve: an effect out of attempts waits for an operator;
// `idemgate effects resolve` makes it due again, and the next relay
// delivers it. A final one cannot be resolved, nor another tenant's.
func TestEffectsResolve(t *testing.T) {
	t.Parallel()
	f := newRelayFixture(t)
	f.mu.Lock()
	f.status = 503
	f.mu.Unlock()
	f.enqueue(t, "incident-9", "page-oncall")
	r := run(t, "", "relay", "--config", f.config, "--once", "--max-attempts", "1")
	if r.code != 0 || !strings.Contains(r.stdout, "1 waiting for an operator") {
		t.Fatalf("relay: %+v", r)
	}
	e := f.effects(t, "incident-9")[0]
	if e.State != ledger.Unknown || !e.WaitsForOperator || e.LastError != "http_503" {
		t.Fatalf("effect %+v", e)
	}
	other := run(t, "", "effects", "resolve", e.ID, "--tenant", "globex", "--state", "prepared", "--note", "x",
		"--store", f.dsn)
	if other.code == 0 {
		t.Fatalf("another tenant resolved it: %+v", other)
	}
	ok := run(t, "", "effects", "resolve", e.ID, "--tenant", "acme", "--state", "prepared",
		"--note", "the pager is back", "--store", f.dsn)
	if ok.code != 0 || !strings.Contains(ok.stdout, "prepared") {
		t.Fatalf("resolve: %+v", ok)
	}
	f.mu.Lock()
	f.status = 201
	f.mu.Unlock()
	if r := run(t, "", "relay", "--config", f.config, "--once"); r.code != 0 ||
		!strings.Contains(r.stdout, "1 succeeded") {
		t.Fatalf("relay after the operator: %+v", r)
	}
	again := run(t, "", "effects", "resolve", e.ID, "--tenant", "acme", "--state", "failed", "--note", "x",
		"--store", f.dsn)
	if again.code == 0 || !strings.Contains(again.stderr, "neither final nor being delivered") {
		t.Fatalf("a final effect resolved: %+v", again)
	}
}

// TestRelayConfig: a relay's configuration needs no routes, but a bad
// upstream is refused with its line.
func TestRelayConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	config := filepath.Join(dir, "relay.yaml")
	text := "store: sqlite:" + filepath.Join(dir, "x.db") + "\nupstreams:\n  crm: {url: ftp://nowhere}\n"
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	r := run(t, "", "relay", "--config", config, "--once")
	if r.code == 0 || !strings.Contains(r.stderr, "relay.yaml:3") {
		t.Fatalf("a bad upstream: %+v", r)
	}
	// An upstream without a timeout (the gateway's default, 30s): the
	// relay's lease follows it.
	text = "store: sqlite:" + filepath.Join(dir, "x.db") + "\nupstreams:\n  crm: {url: http://127.0.0.1:1}\n"
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := run(t, "", "relay", "--config", config, "--once"); r.code != 0 {
		t.Fatalf("an upstream with the default timeout: %+v", r)
	}
	if r := run(t, "", "relay", "--config", config, "--once", "--lease", "30s"); r.code == 0 ||
		!strings.Contains(r.stderr, "do not fit in the lease") {
		t.Fatalf("a lease shorter than the timeout and its margins: %+v", r)
	}
}
