package server_test

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// lostOperation sends a write whose answer the upstream loses: the
// operation is unknown, its effect made once.
func lostOperation(t *testing.T, e *env, key string) *ledger.Operation {
	t.Helper()
	if r := e.do("POST", "/v1/lost", "agent-token", `{"amount_minor":1999}`, "Idempotency-Key", key); r.status != 502 {
		t.Fatalf("lost answer: %+v", r)
	}
	op, err := e.store.GetByKey(context.Background(), ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
		Key: key})
	if err != nil || op.State != ledger.Unknown {
		t.Fatalf("after a lost answer: %+v %v", op, err)
	}
	return op
}

// The answer an operator found upstream is what every retry gets, byte
// for byte, marked as a replay; nothing is sent again.
func TestResolveWithTheUpstreamsAnswer(t *testing.T) {
	t.Parallel()
	forEachResolveStore(t, func(t *testing.T, e *env) {
		op := lostOperation(t, e, "pay-ans")
		const body = "{\"id\":\"ch_9\",\"status\":\"captured\",\"memo\":\"caf\u00e9 \\u2028\"}\n"
		answer := map[string]any{"status": 201, "body": body, "headers": map[string][]string{
			"content-type": {"application/json; charset=utf-8"}, "X-Charge-Id": {"ch_9"}, "Set-Cookie": {"a=1", "b=2"}}}
		resolve := mustJSON(t, map[string]any{"state": "succeeded", "note": "charge ch_9 in the PSP dashboard",
			"result_ref": "ch_9", "response": answer})
		if r := e.do("POST", "/_idem/v1/operations/"+op.ID+"/resolve", "agent-token", resolve); r.status != 403 {
			t.Fatalf("an agent's resolution: %d %s", r.status, r.body)
		}
		r := e.do("POST", "/_idem/v1/operations/"+op.ID+"/resolve", "alice-token", resolve)
		var v contract.View
		if err := json.Unmarshal([]byte(r.body), &v); err != nil || r.status != 200 || v.State != ledger.Succeeded ||
			v.Response == nil || v.Response.Status != 201 || v.ResultRef != "ch_9" || strings.Contains(r.body, "captured") {
			t.Fatalf("resolve: %d %s", r.status, r.body)
		}
		for i := range 2 { // from the store, then from the replay cache
			retry := e.do("POST", "/v1/lost", "agent-token", `{"amount_minor":1999}`, "Idempotency-Key", "pay-ans")
			h := retry.header
			if retry.status != 201 || retry.body != body || h.Get("Content-Type") != "application/json; charset=utf-8" ||
				h.Get("X-Charge-Id") != "ch_9" || !reflect.DeepEqual(h.Values("Set-Cookie"), []string{"a=1", "b=2"}) ||
				h.Get("Idempotent-Replayed") != "true" || h.Get("Idempotency-Operation") != op.ID {
				t.Fatalf("retry %d: %d %v %q", i, retry.status, h, retry.body)
			}
		}
		if n := e.up.count("/v1/lost"); n != 1 {
			t.Fatalf("%d effects, want 1", n)
		}
	})
}

// An answer a replay could not give as it stands is refused, and the
// operation stays unknown, without an answer or a new history entry.
func TestResolveRefusesABadAnswer(t *testing.T) {
	t.Parallel()
	forEachResolveStore(t, func(t *testing.T, e *env) {
		op := lostOperation(t, e, "pay-bad")
		before, _ := e.store.History(context.Background(), op.ID)
		ok := map[string]any{"status": 200, "body": "{}"}
		with := func(k string, v any) map[string]any {
			a := map[string]any{"status": 200, "body": "{}"}
			a[k] = v
			return a
		}
		for name, tc := range map[string]struct {
			state  string
			answer any
			want   string
		}{
			"status 42":          {"succeeded", with("status", 42), "status 42"},
			"a header's newline": {"succeeded", with("headers", map[string][]string{"X-Id": {"1\r\nSet-Cookie: a=1"}}), "control character"},
			"Transfer-Encoding":  {"succeeded", with("headers", map[string][]string{"Transfer-Encoding": {"chunked"}}), "hop-by-hop"},
			"the gateway's own":  {"failed", with("headers", map[string][]string{"Idempotency-Operation": {"op_x"}}), "gateway's own"},
			"with prepared":      {"prepared", ok, "only be stored with succeeded or failed"},
			"over max_response":  {"succeeded", with("body", strings.Repeat("x", 4<<10+1)), "over max_response (4096)"},
			"headers as strings": {"succeeded", with("headers", map[string]string{"X-Id": "1"}), "body: json"},
			"an unknown field":   {"succeeded", with("header", map[string][]string{}), "unknown field"},
			"a body not text":    {"succeeded", with("body", map[string]any{"id": 1}), "body: json"},
		} {
			resolve := mustJSON(t, map[string]any{"state": tc.state, "note": "checked", "response": tc.answer})
			r := e.do("POST", "/_idem/v1/operations/"+op.ID+"/resolve", "alice-token", resolve)
			var p contract.Problem
			if json.Unmarshal([]byte(r.body), &p); r.status != 422 || p.Code != contract.CodeInvalidCommand ||
				!strings.Contains(p.Detail, tc.want) {
				t.Errorf("%s: %d %s, want 422 saying %q", name, r.status, r.body, tc.want)
			}
		}
		now, err := e.store.Get(context.Background(), op.ID)
		after, _ := e.store.History(context.Background(), op.ID)
		if err != nil || now.State != ledger.Unknown || now.Response != nil || len(after) != len(before) {
			t.Fatalf("after refused answers: %+v, %d history entries (was %d)", now, len(after), len(before))
		}
		r := e.do("POST", "/v1/lost", "agent-token", `{"amount_minor":1999}`, "Idempotency-Key", "pay-bad")
		if r.status != 409 || code(r) != "outcome_unknown" || e.up.count("/v1/lost") != 1 {
			t.Fatalf("a retry after refused answers: %+v", r)
		}
	})
}

// Without the upstream's answer, the replay says plainly that it is an
// operator's resolution: who, when, and their note.
func TestResolveWithoutAnAnswerSaysSo(t *testing.T) {
	t.Parallel()
	forEachResolveStore(t, func(t *testing.T, e *env) {
		for _, tc := range []struct {
			state  ledger.State
			status int
		}{{ledger.Succeeded, 200}, {ledger.Failed, 422}} {
			key := "pay-" + string(tc.state)
			op := lostOperation(t, e, key)
			note := "the PSP shows it " + string(tc.state)
			resolve := mustJSON(t, map[string]any{"state": tc.state, "note": note})
			if r := e.do("POST", "/_idem/v1/operations/"+op.ID+"/resolve", "alice-token", resolve); r.status != 200 {
				t.Fatalf("resolve: %d %s", r.status, r.body)
			}
			r := e.do("POST", "/v1/lost", "agent-token", `{"amount_minor":1999}`, "Idempotency-Key", key)
			var got struct {
				contract.Summary
				Resolution contract.ResolutionView `json:"resolution"`
				StatusURL  string                  `json:"status_url"`
			}
			if err := json.Unmarshal([]byte(r.body), &got); err != nil || r.status != tc.status ||
				r.header.Get("Idempotent-Replayed") != "true" || r.header.Get("Idempotency-Operation") != op.ID {
				t.Fatalf("replay of %s: %d %v %s", tc.state, r.status, err, r.body)
			}
			res := got.Resolution
			if got.ID != op.ID || got.State != tc.state || res.By != "alice" || res.Note != note || res.At == nil ||
				!strings.Contains(res.Detail, "an operator resolved this operation as "+string(tc.state)) ||
				!strings.Contains(res.Detail, "not the upstream's") || got.StatusURL != "/_idem/v1/operations/"+op.ID {
				t.Fatalf("replay of %s: %s", tc.state, r.body)
			}
		}
	})
}

func forEachResolveStore(t *testing.T, test func(t *testing.T, e *env)) {
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		test(t, newEnv(t, db.Open(t), db.DSN, "max_response: 4KiB\n"))
	})
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
