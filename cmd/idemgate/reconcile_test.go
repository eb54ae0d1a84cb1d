package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/store/sqlite"
)

// TestReconcileOnce: `idemgate reconcile --once` probes an unknown
// operation of a route that declares a probe, beside any gateway, and
// settles it from the proof; without --once it refuses to run.
func TestReconcileOnce(t *testing.T) {
	t.Parallel()
	probes := 0
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/intents/7" || r.Header.Get("Authorization") != "Bearer up-secret" {
			w.WriteHeader(400)
			return
		}
		probes++
		fmt.Fprint(w, `{"status":"captured"}`)
	}))
	defer up.Close()
	config, db := probedConfig(t, t.TempDir(), up.URL, "")
	s := dbtest.SQLiteAt(t, db)
	r, err := s.Reserve(context.Background(), ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: "cap-7",
		Route: "POST /v1/intents/{id}/capture", Fingerprint: "sha256:aa", Lease: time.Minute, Retention: time.Hour,
		Actor: "gw", Probe: "GET /v1/intents/7"})
	if err == nil {
		_, err = s.MarkUnknown(context.Background(), *r.Lease, ledger.Note{Reason: "answer lost"})
	}
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res := run(t, "", "reconcile", "--config", config); res.code == 0 || !strings.Contains(res.stderr, "--once") {
		t.Fatalf("without --once: %+v", res)
	}
	res := run(t, "", "reconcile", "--config", config, "--once")
	if res.code != 0 || !strings.Contains(res.stdout, "settled 1 unknown operation") || probes != 1 {
		t.Fatalf("reconcile --once: %+v (probes %d)", res, probes)
	}
	show := run(t, "", "ops", "show", r.Op.ID, "--store", "sqlite:"+db)
	if !strings.Contains(show.stdout, "succeeded") || !strings.Contains(show.stdout, ledger.ActorReconciler) {
		t.Fatalf("after the probe: %s", show.stdout)
	}
}

// TestReconcileOnceSweepsAndSeals: reconcile --once first makes unknown an
// operation whose owner died (its lease lapsed, nobody swept it), then
// probes it with the others, and seals the events it recorded, as serve's
// maintenance plane would.
func TestReconcileOnceSweepsAndSeals(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"status":"captured"}`)
	}))
	defer up.Close()
	dir := t.TempDir()
	key := filepath.Join(dir, "audit.key")
	if _, err := audit.Keygen(key, "reconcile-test"); err != nil {
		t.Fatal(err)
	}
	config, db := probedConfig(t, dir, up.URL, fmt.Sprintf("audit: {signing_key: %s, checkpoint_interval: 1h}\n", key))
	s := dbtest.SQLiteAt(t, db)
	r, err := s.Reserve(context.Background(), ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: "cap-8",
		Route: "POST /v1/intents/{id}/capture", Fingerprint: "sha256:aa", Lease: time.Millisecond,
		Retention: time.Hour, Actor: "dead-gateway", Probe: "GET /v1/intents/8"})
	s.Close()
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond) // the owner is gone: its lease lapses
	res := run(t, "", "reconcile", "--config", config, "--once")
	if res.code != 0 || !strings.Contains(res.stdout, "settled 1 unknown operation") {
		t.Fatalf("reconcile --once: %+v", res)
	}
	s, err = sqlite.Open(context.Background(), db, sqlite.Options{MustExist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	op, err := s.Get(context.Background(), r.Op.ID)
	if err != nil || op.State != ledger.Succeeded {
		t.Fatalf("after reconcile --once: %+v %v", op, err)
	}
	evs, err := s.AuditEvents(context.Background(), ledger.AuditParams{OperationID: op.ID})
	if err != nil || len(evs) < 3 {
		t.Fatalf("events %+v %v", evs, err)
	}
	for _, e := range evs {
		if e.Seq < 0 {
			t.Errorf("event %s not sealed", e.Kind)
		}
	}
}

// probedConfig writes, in dir, a configuration whose capture route
// declares a probe to upstream, with extra lines at its end; it returns
// the file and the store's path.
func probedConfig(t *testing.T, dir, upstream, extra string) (config, db string) {
	t.Helper()
	db, config = filepath.Join(dir, "gw.db"), filepath.Join(dir, "gw.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`store: sqlite:%s
upstreams: {pay: {url: %s, headers: {Authorization: "Bearer up-secret"}}}
routes:
  - match: "POST /v1/intents/{id}/capture"
    upstream: pay
    reconcile: {probe: 'GET /v1/intents/{{.params.id}}', applied: 'body.status == "captured"',
                not_applied: 'body.status == "requires_capture"'}
%s`, db, upstream, extra)), 0o600); err != nil {
		t.Fatal(err)
	}
	return config, db
}
