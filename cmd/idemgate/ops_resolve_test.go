package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
)

// unknownOp reserves an operation and loses its answer.
func unknownOp(t *testing.T, s ledger.Store, key string) *ledger.Operation {
	t.Helper()
	c := context.Background()
	r, err := s.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
		Tenant: "acme", Key: key, Route: "POST /v1/payments",
		Fingerprint: "sha256:aa", Lease: time.Hour, Retention: time.Hour, Actor: "gw"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MarkUnknown(c, *r.Lease, ledger.Note{Reason: "upstream_timeout"}); err != nil {
		t.Fatal(err)
	}
	return r.Op
}

// ops resolve stores the upstream's answer an operator found, checked as
// the control API checks it; a refused one changes nothing.
func TestOpsResolveWithTheUpstreamsAnswer(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		dsn, s := db.DSN, db.Open(t)
		op := unknownOp(t, s, "pay-1")
		dir := t.TempDir()
		const body = "{\"id\":\"ch_1\",\"status\":\"captured\"}\n"
		file, big := filepath.Join(dir, "answer.json"), filepath.Join(dir, "big.json")
		if os.WriteFile(file, []byte(body), 0o600) != nil || os.WriteFile(big, make([]byte, 65), 0o600) != nil {
			t.Fatal("cannot write the bodies")
		}
		testResolveRefusals(t, s, dsn, op, big)

		r := run(t, "", "ops", "resolve", op.ID, "--store", dsn, "--state", "succeeded", "--note", "charge ch_1 found",
			"--status", "201", "--header", "content-type: application/json", "--header", "Set-Cookie: a=1",
			"--header", "Set-Cookie:b=2", "--body-file", file, "--result-ref", "ch_1", "--json")
		var v contract.View
		if err := json.Unmarshal([]byte(r.stdout), &v); err != nil || r.code != 0 || v.State != ledger.Succeeded ||
			v.Response == nil || v.Response.Status != 201 || v.ResultRef != "ch_1" {
			t.Fatalf("ops resolve with an answer: %v %+v", err, r)
		}
		got, err := s.Get(context.Background(), op.ID)
		want := map[string][]string{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}}
		if err != nil || got.Response.Status != 201 || string(got.Response.Body) != body ||
			!reflect.DeepEqual(got.Response.Header, want) {
			t.Fatalf("stored: %+v %v", got.Response, err)
		}

		other := unknownOp(t, s, "pay-2")
		r = run(t, "{\"declined\":true}", "ops", "resolve", other.ID, "--store", dsn, "--state", "failed",
			"--note", "declined", "--status", "402", "--body-file", "-")
		if got, _ := s.Get(context.Background(), other.ID); r.code != 0 || got.Response == nil ||
			got.Response.Status != 402 || string(got.Response.Body) != `{"declined":true}` {
			t.Fatalf("a body from standard input: %+v", r)
		}
	})
}

// testResolveRefusals tries answers ops resolve must refuse, and checks
// that op is still unknown, without an answer.
func testResolveRefusals(t *testing.T, s ledger.Store, dsn string, op *ledger.Operation, big string) {
	t.Helper()
	for want, bad := range map[string][]string{
		"status 42":          {"--state", "succeeded", "--status", "42"},
		"need --status":      {"--state", "succeeded", "--header", "X-Id: 1"},
		"hop-by-hop":         {"--state", "succeeded", "--status", "200", "--header", "Transfer-Encoding: chunked"},
		"control character":  {"--state", "succeeded", "--status", "200", "--header", "X-Id: 1\nSet-Cookie: a=1"},
		"not a valid name":   {"--state", "succeeded", "--status", "200", "--header", "X Id: 1"},
		"'Name: value'":      {"--state", "succeeded", "--status", "200", "--header", "X-Id"},
		"succeeded or faile": {"--state", "prepared", "--status", "200"},
		"over max_response":  {"--state", "succeeded", "--status", "200", "--body-file", big, "--max-response", "64"},
		"none of the others": {"--state", "succeeded", "--status", "200", "--body", "x", "--body-file", big},
		"no such file":       {"--state", "succeeded", "--status", "200", "--body-file", big + ".missing"},
	} {
		r := run(t, "", append([]string{"ops", "resolve", op.ID, "--store", dsn, "--note", "x"}, bad...)...)
		if r.code != 1 || !strings.Contains(r.stderr, want) {
			t.Errorf("ops resolve %v: %+v, want %q", bad, r, want)
		}
	}
	if got, err := s.Get(context.Background(), op.ID); err != nil || got.State != ledger.Unknown || got.Response != nil {
		t.Fatalf("after refused answers: %+v %v", got, err)
	}
}

// ops resolve gives an action's unknown operation the result its owner
// would have recorded; a result that is not JSON, or one for a route's
// operation, is refused and changes nothing.
func TestOpsResolveAnActionsResult(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, db dbtest.DB) {
		t.Parallel()
		dsn, s := db.DSN, db.Open(t)
		c := context.Background()
		r, err := s.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindAction,
			Tenant: "acme", Key: "mail-1", Route: contract.ActionRoute("mail.send"),
			Fingerprint: "sha256:bb", Lease: time.Hour, Retention: time.Hour, Actor: "gw"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.MarkUnknown(c, *r.Lease, ledger.Note{Reason: "owner_unknown"}); err != nil {
			t.Fatal(err)
		}
		route := unknownOp(t, s, "pay-1")
		for _, bad := range []struct{ id, result, want string }{
			{r.Op.ID, `{"message_id":`, "not JSON"},
			{route.ID, `{"message_id":"m-1"}`, "action's operation"},
		} {
			out := run(t, "", "ops", "resolve", bad.id, "--store", dsn, "--state", "succeeded", "--note", "x", "--result", bad.result)
			if out.code != 1 || !strings.Contains(out.stderr, bad.want) {
				t.Errorf("--result %s: %+v, want %q", bad.result, out, bad.want)
			}
		}
		out := run(t, "", "ops", "resolve", r.Op.ID, "--store", dsn, "--state", "succeeded", "--note", "found in the SMTP log",
			"--result", `{ "message_id": "m-1" }`, "--result-ref", "m-1")
		got, err := s.Get(c, r.Op.ID)
		if out.code != 0 || err != nil || got.State != ledger.Succeeded || string(contract.ResultOf(got)) != `{"message_id":"m-1"}` ||
			got.ResultRef != "m-1" {
			t.Fatalf("ops resolve --result: %+v %+v %v", out, got, err)
		}
		if got, _ := s.Get(c, route.ID); got.State != ledger.Unknown {
			t.Fatalf("a refused result changed %s", got.State)
		}
	})
}
