package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

// traceRow is what one event's row and object must say.
type traceRow struct {
	seq                           string // "unsealed" for none
	kind, run, principal, key, fp string
	status, ref, trace            string // "-" for none
}

// TestAuditTrace: trace shows, per event in order, the run, principal,
// key, fingerprint and the upstream's answer, the event's position or
// "unsealed", and a summary of what was forwarded, replayed and refused;
// --json gives the export's objects, seq null for an unsealed event.
func TestAuditTrace(t *testing.T) {
	t.Parallel()
	a := newAuditStore(t)
	_, lines := a.export(t)
	fp, tr := a.disputedFP, a.traceDisputed
	disputed := []traceRow{
		{"0", "forwarded", "run-A", "agent-7", "k-1", fp, "-", "-", tr},
		{"1", "released", "run-A", "agent-7", "k-1", fp, "-", "-", tr},
		{"2", "forwarded", "run-B", "agent-7", "k-1", fp, "-", "-", tr},
		{"3", "succeeded", "run-B", "agent-7", "k-1", fp, "201", "T-1", tr},
		{"unsealed", "replayed", "run-F", "agent-9", "k-1", fp, "201", "T-1", "-"},
		{"unsealed", "conflict", "run-G", "agent-9", "k-1", "sha256:ff", "-", "-", "-"},
	}
	checkTraceTable(t, a, a.disputed.ID, disputed, "6 events (2 not yet sealed into the log). Forwarded upstream: 2 "+
		"(by run run-A, run-B). Replayed from the stored answer, nothing sent and never a creation: 1. Conflicts "+
		"(the key with another request): 1. Final state: succeeded, upstream 201, result_ref T-1.")
	objs := checkTraceJSON(t, a, a.disputed.ID, disputed)
	for i, obj := range objs[:4] {
		if !bytes.Equal(obj, lines[i]) {
			t.Errorf("--json event %d is not its export line:\n%s\n%s", i, obj, lines[i])
		}
	}
	failed := []traceRow{
		{"4", "received", "run-C", "agent-8", "k-2", a.failedFP, "-", "-", "-"},
		{"5", "forwarded", "run-C", "agent-8", "k-2", a.failedFP, "-", "-", "-"},
		{"6", "failed", "run-C", "agent-8", "k-2", a.failedFP, "422", "-", "-"},
	}
	checkTraceTable(t, a, a.failed.ID, failed, "Forwarded upstream: 1 (by run run-C). Replayed")
	checkTraceTable(t, a, a.partial.ID, nil, "Latest state: unknown (not final).")
	pending := []traceRow{
		{"9", "forwarded", "run-E", "-", "k-4", "sha256:ee", "-", "-", "-"},
		{"unsealed", "succeeded", "run-E", "-", "k-4", "sha256:ee", "201", "T-4", "-"},
	}
	checkTraceTable(t, a, a.pending.ID, pending, "2 events (1 not yet sealed into the log). Forwarded upstream: 1")
	objs = checkTraceJSON(t, a, a.pending.ID, pending)
	if !bytes.Equal(objs[0], lines[9]) {
		t.Errorf("--json sealed event is not its export line: %s", objs[0])
	}
	if r := run(t, "", "audit", "trace", "op_nope", "--store", a.dsn); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Fatalf("trace a missing operation: %+v", r)
	}
}

// checkTraceTable runs trace and checks its rows (if want is set) and
// its summary.
func checkTraceTable(t *testing.T, a *auditStore, opID string, want []traceRow, summary string) {
	t.Helper()
	r := run(t, "", "audit", "trace", opID, "--store", a.dsn)
	table, para, _ := strings.Cut(r.stdout, "\n\n")
	rows := strings.Split(table, "\n")
	if r.code != 0 || !strings.HasPrefix(rows[0], "SEQ ") || !strings.Contains(para, summary) {
		t.Fatalf("trace %s: %+v", opID, r)
	}
	if want == nil {
		return
	}
	evs, err := a.s.AuditEvents(context.Background(), ledger.AuditParams{OperationID: opID})
	if err != nil || len(rows) != len(want)+1 || len(evs) != len(want) {
		t.Fatalf("trace %s: %d rows, %d events, want %d: %v\n%s", opID, len(rows)-1, len(evs), len(want), err, r.stdout)
	}
	for i, w := range want {
		got := strings.Fields(rows[i+1])
		exp := []string{w.seq, stamp(evs[i].At), w.kind, w.run, w.principal, w.key, w.fp, w.status, w.ref, w.trace,
			cmp.Or(evs[i].Actor, "-")}
		if strings.Join(got, " ") != strings.Join(exp, " ") {
			t.Errorf("trace %s row %d:\n got %q\nwant %q", opID, i, got, exp)
		}
	}
}

// checkTraceJSON runs trace --json, checks each object's fields against
// want, and returns the objects.
func checkTraceJSON(t *testing.T, a *auditStore, opID string, want []traceRow) []json.RawMessage {
	t.Helper()
	r := run(t, "", "audit", "trace", opID, "--json", "--store", a.dsn)
	var objs []json.RawMessage
	if err := json.Unmarshal([]byte(r.stdout), &objs); err != nil || r.code != 0 || len(objs) != len(want) {
		t.Fatalf("trace --json %s: %v %+v", opID, err, r)
	}
	for i, w := range want {
		var o map[string]any
		d := json.NewDecoder(bytes.NewReader(objs[i]))
		d.UseNumber()
		if err := d.Decode(&o); err != nil {
			t.Fatal(err)
		}
		seq := "unsealed"
		if o["seq"] != nil {
			seq = jsonText(o["seq"])
		}
		got := []string{seq, jsonText(o["kind"]), jsonText(o["run_id"]), jsonText(o["principal"]), jsonText(o["key"]),
			jsonText(o["fingerprint"]), jsonText(o["upstream_status"]), jsonText(o["result_ref"]), jsonText(o["trace_id"])}
		exp := []string{w.seq, w.kind, w.run, w.principal, w.key, w.fp, w.status, w.ref, w.trace}
		if strings.Join(got, " ") != strings.Join(exp, " ") || o["operation_id"] != opID || o["tenant"] != "acme" {
			t.Errorf("trace --json %s event %d:\n got %q\nwant %q\n%s", opID, i, got, exp, objs[i])
		}
	}
	return objs
}

// jsonText is a decoded JSON value as the table shows it: "-" for null.
func jsonText(v any) string {
	switch v := v.(type) {
	case nil:
		return "-"
	case string:
		return v
	case json.Number:
		return v.String()
	}
	return "?"
}

// TestAuditTraceSummary: replays and conflicts are counted apart from the
// requests forwarded (a replay is never a creation), and a hostile value
// cannot break the table or reach the terminal raw.
func TestAuditTraceSummary(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	ev := func(seq int64, kind audit.Kind, run string) audit.Event {
		return audit.Event{Seq: seq, At: at, Tenant: "acme", OperationID: "op_1", Kind: kind, RunID: run,
			Key: "k\x1b[2J\tx", Fingerprint: "sha256:aa"}
	}
	evs := []audit.Event{ev(0, audit.Forwarded, "run-A"), ev(1, audit.Succeeded, "run-A"),
		ev(2, audit.Replayed, "run-B"), ev(3, audit.Conflict, "run-C"), ev(-1, audit.Replayed, "run-D")}
	evs[0].To, evs[1].From, evs[1].To, evs[1].UpstreamStatus, evs[1].ResultRef = "executing", "executing", "succeeded", 201, "T-1"
	var b bytes.Buffer
	if err := writeTrace(&b, evs); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"5 events (1 not yet sealed into the log). Forwarded upstream: 1 (by run run-A). " +
		"Replayed from the stored answer, nothing sent and never a creation: 2. Conflicts (the key with another " +
		"request): 1. Final state: succeeded, upstream 201, result_ref T-1.", `k\x1b[2J\tx`} {
		if !strings.Contains(out, want) {
			t.Errorf("trace lacks %q:\n%s", want, out)
		}
	}
	if strings.ContainsAny(out, "\x1b\t") || len(strings.Fields(strings.Split(out, "\n")[1])) != 11 {
		t.Errorf("a raw control character, or a broken row:\n%q", out)
	}
	e := ev(-1, audit.Replayed, "run-D")
	e.Reason = `,"seq":0,`
	obj, err := eventJSON(e)
	var o map[string]any
	if err != nil || json.Unmarshal(obj, &o) != nil || o["seq"] != nil || o["reason"] != `,"seq":0,` ||
		o["key"] != e.Key || o["upstream_status"] != nil {
		t.Fatalf("an unsealed event's object: %s %v", obj, err)
	}
}
