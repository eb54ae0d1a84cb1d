package server_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/internal/dbtest"
)

// auditSection writes a signing key and returns an audit section using it,
// with a checkpoints file, and the verifier key.
func auditSection(t *testing.T) (section, pub, checkpoints string) {
	dir := t.TempDir()
	key := filepath.Join(dir, "audit.key")
	vkey, err := audit.Keygen(key, "gw-test")
	if err != nil {
		t.Fatal(err)
	}
	checkpoints = filepath.Join(dir, "checkpoints.jsonl")
	return "audit: {signing_key: " + key + ", checkpoint_interval: 50ms, checkpoints_file: " + checkpoints + "}\n",
		vkey, checkpoints
}

// TestAuditThroughTheGateway: with an audit section the gateway seals its
// tenants' logs, serves each tenant its latest checkpoint and, to an
// admin, its export, which verifies offline with the checkpoints file;
// a route's result_ref lands in the operation's view.
func TestAuditThroughTheGateway(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		section, pub, checkpoints := auditSection(t)
		store, dsn := db.Open(t), db.DSN
		e := newEnv(t, store, dsn, "  - {match: POST /v1/refs, upstream: ops, result_ref: body:/id}\n"+section)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go e.g.RunBackground(ctx)
		r := e.do("POST", "/v1/refs", "agent-token", `{"title":"x"}`, "Idempotency-Key", "k-1",
			"Idempotency-Run", "run-1")
		if again := e.do("POST", "/v1/refs", "agent-token", `{"title":"x"}`, "Idempotency-Key", "k-1"); r.status != 201 ||
			again.status != 201 {
			t.Fatalf("statuses %d %d", r.status, again.status)
		}
		view := e.do("GET", "/_idem/v1/operations/"+r.header.Get("Idempotency-Operation"), "agent-token", "")
		if !strings.Contains(view.body, `"result_ref":"R-1"`) || !strings.Contains(view.body, `"principal":"agent"`) ||
			!strings.Contains(view.body, `"target":"POST /v1/refs"`) {
			t.Fatalf("the view: %s", view.body)
		}
		var cp reply
		waitUntil(t, "a checkpoint covering the replay", func() bool {
			cp = e.do("GET", "/_idem/v1/audit/checkpoint", "agent-token", "")
			c, err := audit.ParseCheckpoint(cp.body)
			return cp.status == 200 && err == nil && c.Size == 3 // forwarded, succeeded, replayed
		})
		if !strings.HasPrefix(cp.body, "gw-test/acme\n3\n") {
			t.Fatalf("checkpoint %q", cp.body)
		}
		if other := e.do("GET", "/_idem/v1/audit/checkpoint", "globex-token", ""); other.status != 404 {
			t.Fatalf("another tenant's checkpoint: %d %s", other.status, other.body)
		}
		if denied := e.do("GET", "/_idem/v1/audit/export", "agent-token", ""); denied.status != 403 {
			t.Fatalf("an agent's export: %d", denied.status)
		}
		export := e.do("GET", "/_idem/v1/audit/export", "alice-token", "")
		path := filepath.Join(t.TempDir(), "export.jsonl")
		if err := os.WriteFile(path, []byte(export.body), 0o600); err != nil {
			t.Fatal(err)
		}
		v, err := audit.LoadVerifier(pub)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := audit.Verify(path, v, checkpoints)
		if err != nil || rep.Events != 3 || rep.Origin != "gw-test/acme" {
			t.Fatalf("verify the export: %+v %v\n%s", rep, err, export.body)
		}
		if strings.Contains(export.body, "agent-token") || strings.Contains(export.body, "upstream-secret") ||
			strings.Contains(export.body, `"title"`) {
			t.Fatal("a secret or a body in the export")
		}
	})
}

// waitUntil polls cond for up to 5 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestAuditConfig: an audit section without a usable key is an error
// naming its line; its paths are the configuration's relatives.
func TestAuditConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if _, err := audit.Keygen(filepath.Join(dir, "k"), "x"); err != nil {
		t.Fatal(err)
	}
	base := "store: sqlite:x.db\nupstreams: {ops: {url: 'http://127.0.0.1:1'}}\n" +
		"routes: [{match: POST /v1/t, upstream: ops}]\n"
	for text, want := range map[string]string{
		"audit: {checkpoint_every: 5}\n":                     ":4: audit: signing_key is required",
		"audit: {signing_key: missing}\n":                    ":4: audit: signing key",
		"audit: {signing_key: k.pub}\n":                      ":4: audit: signing key",
		"audit: {signing_key: k, checkpoint_every: -1}\n":    ":4: audit: checkpoint_every",
		"audit: {signing_key: k, checkpoint_intervals: 1}\n": "checkpoint_intervals",
	} {
		if _, err := config.Parse(filepath.Join(dir, "gw.yaml"), []byte(base+text)); err == nil ||
			!strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", text, err, want)
		}
	}
	cfg, err := config.Parse(filepath.Join(dir, "gw.yaml"), []byte(base+"audit: {signing_key: k, checkpoints_file: c}\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := cfg.Audit.Signing()
	if cfg.Audit.CheckpointsFile != filepath.Join(dir, "c") || s.Every != 1000 || s.After != 10*time.Second || s.Name != "x" {
		t.Fatalf("defaults: %+v %+v", cfg.Audit, s)
	}
}
