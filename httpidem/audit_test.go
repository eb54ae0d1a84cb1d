package httpidem_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// auditedApp is an app whose middleware records its events that are no
// transition through a real batcher into the real store.
func auditedApp(t *testing.T, s ledger.Store, routes []httpidem.Route) (*app, *ledger.EventBatcher) {
	b := ledger.NewEventBatcher(s, 0, nil)
	a := newApp(t, s, httpidem.Options{Audit: b, Routes: routes,
		Principal: func(r *http.Request) (approval.Principal, error) {
			return approval.Principal{Name: "agent-" + r.Header.Get("X-Tenant"), Tenant: r.Header.Get("X-Tenant")}, nil
		}})
	return a, b
}

// storyOf reads an operation's events once the batcher has written its own.
func storyOf(t *testing.T, s ledger.Store, b *ledger.EventBatcher, opID string) []audit.Event {
	t.Helper()
	b.Close()
	es, err := s.AuditEvents(context.Background(), ledger.AuditParams{OperationID: opID})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

func kinds(es []audit.Event) []audit.Kind {
	var out []audit.Kind
	for _, e := range es {
		out = append(out, e.Kind)
	}
	return out
}

// TestAuditAnswersTheFourQuestions: the log of a write and its retries
// says which run sent each request, with which key, under which
// fingerprint, and what the upstream answered (status, reference, and the
// answer's hash); a replay is recorded as a replay, never as a creation,
// and a conflict with the fingerprint the retry had.
func TestAuditAnswersTheFourQuestions(t *testing.T) {
	t.Parallel()
	forEachStore(t, func(t *testing.T, s ledger.Store) {
		routes := []httpidem.Route{{Method: "POST", Pattern: "/v1/tickets", ResultRef: "body:/ticket"}}
		a, b := auditedApp(t, s, routes)
		const trace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
		first := a.post("k-1", "acme", `{"title":"printer"}`, "Idempotency-Run", "run-A", "traceparent", trace)
		again := a.post("k-1", "acme", `{"title":"printer"}`, "Idempotency-Run", "run-B", "traceparent", "garbage")
		changed := a.post("k-1", "acme", `{"title":"scanner"}`, "Idempotency-Run", "run-C")
		if first.status != 201 || again.status != 201 || changed.status != 422 || a.effects.Load() != 1 {
			t.Fatalf("statuses %d %d %d, effects %d", first.status, again.status, changed.status, a.effects.Load())
		}
		opID := first.header.Get("Idempotency-Operation")
		es := storyOf(t, s, b, opID)
		if got := kinds(es); !slices.Equal(got, []audit.Kind{audit.Forwarded, audit.Succeeded, audit.Replayed, audit.Conflict}) {
			t.Fatalf("the story: %v", got)
		}
		fwd, done, replay, conflict := es[0], es[1], es[2], es[3]
		if fwd.RunID != "run-A" || fwd.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" || fwd.Principal != "agent-acme" ||
			fwd.Target != "POST /v1/tickets" || fwd.Key != "k-1" || fwd.Route != "POST /v1/tickets" {
			t.Fatalf("the forwarded event: %+v", fwd)
		}
		if done.UpstreamStatus != 201 || done.ResultRef != "T-1" || done.ResponseSHA256 == "" {
			t.Fatalf("the completion: %+v", done)
		}
		if replay.RunID != "run-B" || replay.TraceID != "" || replay.UpstreamStatus != 201 || replay.ResultRef != "T-1" ||
			replay.ResponseSHA256 != done.ResponseSHA256 || replay.Fingerprint != fwd.Fingerprint {
			t.Fatalf("the replay: %+v", replay)
		}
		if conflict.RunID != "run-C" || conflict.Fingerprint == fwd.Fingerprint || conflict.UpstreamStatus != 0 ||
			!strings.Contains(conflict.Reason, fwd.Fingerprint) {
			t.Fatalf("the conflict: %+v", conflict)
		}
		op, err := s.Get(context.Background(), opID)
		if err != nil || op.ResultRef != "T-1" || op.Principal != "agent-acme" || op.RunID != "run-A" {
			t.Fatalf("the operation: %+v %v", op, err)
		}
	})
}

// TestAuditResultRefFromAHeader: a reference named by a header is read
// from the upstream's answer; a failed answer has none.
func TestAuditResultRefFromAHeader(t *testing.T) {
	t.Parallel()
	s := dbtest.SQLite(t)
	a, b := auditedApp(t, s, []httpidem.Route{{Method: "POST", Pattern: "/v1/tickets", ResultRef: "header:X-Request-Id"}})
	a.behave = func(w http.ResponseWriter, r *http.Request, n int64) {
		w.Header().Set("X-Request-Id", "req-42")
		if r.Header.Get("X-Fail") != "" {
			w.WriteHeader(400)
			return
		}
		w.WriteHeader(201)
	}
	ok := a.post("k-1", "acme", `{}`)
	bad := a.post("k-2", "acme", `{}`, "X-Fail", "1")
	b.Close()
	for reply, want := range map[*reply]string{&ok: "req-42", &bad: ""} {
		op, err := s.Get(context.Background(), reply.header.Get("Idempotency-Operation"))
		if err != nil || op.ResultRef != want {
			t.Fatalf("status %d: result_ref %q (%v), want %q", reply.status, op.ResultRef, err, want)
		}
	}
}

// TestAuditBadRunIsRefused: an Idempotency-Run that is not printable text
// of 255 bytes at most, or is sent twice, is refused before anything is
// reserved.
func TestAuditBadRunIsRefused(t *testing.T) {
	t.Parallel()
	s := dbtest.SQLite(t)
	a, b := auditedApp(t, s, nil)
	defer b.Close()
	for _, extra := range [][]string{{"Idempotency-Run", strings.Repeat("r", 256)},
		{"Idempotency-Run", "a\u0085b"}, {"Idempotency-Run", "one", "Idempotency-Run", "two"}} {
		r := a.post("k-bad", "acme", `{}`, extra...)
		if r.status != 400 || problemCode(t, r) != contract.CodeInvalidRequest {
			t.Fatalf("%q: %d %s", extra, r.status, r.body)
		}
	}
	if a.operations() != 0 || a.effects.Load() != 0 {
		t.Fatal("a refused request reserved or forwarded")
	}
	if r := a.post("k-ok", "acme", `{}`, "Idempotency-Run", strings.Repeat("é", 127)); r.status != 201 {
		t.Fatalf("a run of 254 bytes: %d", r.status)
	}
}
