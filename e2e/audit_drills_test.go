package e2e

import (
	"bytes"
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/note"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/internal/testenv"
)

// The audit drills (docs/design.md, "Audit log"): every drill story told by the
// log with the right kinds, no secret in an export, one log sealed exactly
// once by two gateways sharing PostgreSQL, a gateway SIGKILLed while it
// seals, and tampering done in the store itself. Every verdict on an
// export is `idemgate audit verify`'s, offline, with the verifier key
// alone: what an auditor holds.

// upstreamCredential is the credential the gateway adds for the ops API,
// which no export may hold.
const upstreamCredential = "drill-upstream-credential-5f1c0a9e"

func (d *drill) auditKey() string        { return filepath.Join(d.dir, "audit.key") }
func (d *drill) checkpointsFile() string { return filepath.Join(d.dir, "checkpoints.jsonl") }

// auditConfig makes the drill's signing key with `idemgate audit keygen`
// and returns the configuration's audit block, the ops upstream's extra
// members (a credential header) and the ticket route's (where its result
// reference is); nothing without setup.audit, so that other drills run the
// configuration they always did.
func (d *drill) auditConfig() (block, upstream, tickets string) {
	if !d.setup.audit {
		return "", "", ""
	}
	if out, err := exec.Command(binary, "audit", "keygen", d.auditKey()).CombinedOutput(); err != nil {
		d.t.Fatalf("audit keygen: %v: %s", err, out)
	}
	block = fmt.Sprintf("audit: {signing_key: %q, checkpoint_every: %d, checkpoint_interval: 200ms, "+
		"checkpoints_file: %q}\n", d.auditKey(), cmp.Or(d.setup.checkpointEvery, 1000), d.checkpointsFile())
	return block, fmt.Sprintf(", headers: {X-Ops-Credential: %q}", upstreamCredential), ", result_ref: body:/id"
}

// auditLog is one export as downloaded: its bytes, its events, and the
// checkpoints it carries, each opened with the drill's verifier key.
type auditLog struct {
	raw    []byte
	events []audit.Event
	cps    []audit.Checkpoint
}

// signed is the size the largest checkpoint vouches for.
func (l auditLog) signed() int64 {
	var n int64
	for _, c := range l.cps {
		n = max(n, c.Size)
	}
	return n
}

// of is one operation's events, in log order.
func (l auditLog) of(opID string) []audit.Event {
	var out []audit.Event
	for _, e := range l.events {
		if e.OperationID == opID {
			out = append(out, e)
		}
	}
	return out
}

func count(events []audit.Event, kind audit.Kind) int {
	n := 0
	for _, e := range events {
		if e.Kind == kind {
			n++
		}
	}
	return n
}

// transitions are the events of a story that are not batched: the store
// wrote each in the transaction of the transition (or decision) it tells.
func transitions(events []audit.Event) []audit.Event {
	var out []audit.Event
	for _, e := range events {
		if !slices.Contains(audit.Recorded, e.Kind) {
			out = append(out, e)
		}
	}
	return out
}

func (d *drill) verifier() note.Verifier {
	d.t.Helper()
	v, err := audit.LoadVerifier(d.auditKey() + ".pub")
	if err != nil {
		d.t.Fatal(err)
	}
	return v
}

// fetchExport downloads the tenant's export as the operator. A body cut
// short (the gateway aborts an export it cannot finish) is an error:
// do() would hand back the part read.
func (d *drill) fetchExport() ([]byte, error) {
	req, err := http.NewRequest("GET", d.gw.URL+"/_idem/v1/audit/export", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+operatorToken)
	resp, err := noReuse.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("export cut after %d bytes: %w", len(b), err)
	}
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("export: %d %s", resp.StatusCode, b)
	}
	return b, nil
}

// parseLog reads an export's lines; a checkpoint the key does not open,
// or a line that is no event, fails the drill at once rather than being
// waited on.
func (d *drill) parseLog(raw []byte) auditLog {
	d.t.Helper()
	l := auditLog{raw: raw}
	for n, line := range bytes.Split(bytes.TrimRight(raw, "\n"), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if bytes.HasPrefix(line, []byte(`{"checkpoint"`)) {
			var cl struct{ Checkpoint string }
			if err := json.Unmarshal(line, &cl); err != nil {
				d.t.Fatalf("export line %d: %v", n+1, err)
			}
			c, err := audit.OpenCheckpoint([]byte(cl.Checkpoint), d.verifier())
			if err != nil {
				d.t.Fatalf("export line %d: %v", n+1, err)
			}
			l.cps = append(l.cps, c)
			continue
		}
		e, err := audit.ParseEvent(line)
		if err != nil {
			d.t.Fatalf("export line %d: %v: %s", n+1, err, line)
		}
		l.events = append(l.events, e)
	}
	return l
}

// waitLog waits until the export is sealed and signed to its end and
// holds at least n events: the batcher (100 ms) and the sealer work
// behind the answers, so a drill waits for them and then judges exactly.
// On a timeout it says what the log held.
func (d *drill) waitLog(n int) auditLog {
	d.t.Helper()
	var l auditLog
	var err error
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		var raw []byte
		if raw, err = d.fetchExport(); err == nil {
			l = d.parseLog(raw)
			if standFor(l.events) >= n && l.signed() == int64(len(l.events)) {
				break
			}
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("timed out waiting for %d audit events sealed and signed: the export (err %v) holds %v, "+
				"signed to %d", n, err, kinds(l.events), l.signed())
		}
	}
	for i, e := range l.events {
		if e.Seq != int64(i) {
			d.t.Fatalf("export line %d holds event %d", i+1, e.Seq)
		}
	}
	return l
}

// repeated is the note of an event the batcher wrote once for several
// identical requests (ledger.EventBatcher).
var repeated = regexp.MustCompile(`(?:^|; )(\d+) requests, the last at `)

// standFor is how many requests and transitions the events stand for: a
// coalesced event counts its requests.
func standFor(events []audit.Event) int {
	n := 0
	for _, e := range events {
		if m := repeated.FindStringSubmatch(e.Reason); m != nil {
			k, _ := strconv.Atoi(m[1])
			n += k
			continue
		}
		n++
	}
	return n
}

// kinds counts events by kind, for a message.
func kinds(events []audit.Event) map[audit.Kind]int {
	out := map[audit.Kind]int{}
	for _, e := range events {
		out[e.Kind]++
	}
	return out
}

// verify runs `idemgate audit verify` on an export, with earlier
// checkpoint files, and returns its output and exit status.
func (d *drill) verify(raw []byte, earlier ...string) (string, int) {
	d.t.Helper()
	f, err := os.CreateTemp(d.dir, "export-*.jsonl")
	if err != nil {
		d.t.Fatal(err)
	}
	if _, err := f.Write(raw); err != nil {
		d.t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		d.t.Fatal(err)
	}
	args := []string{"audit", "verify", f.Name(), "--key", d.auditKey() + ".pub"}
	for _, e := range earlier {
		args = append(args, "--checkpoint", e)
	}
	out, err := exec.Command(binary, args...).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	d.t.Fatalf("audit verify: %v: %s", err, out)
	return "", 0
}

func (d *drill) wantVerified(raw []byte, earlier ...string) {
	d.t.Helper()
	if out, code := d.verify(raw, earlier...); code != 0 || !strings.HasPrefix(out, "ok: ") {
		d.t.Fatalf("audit verify exited %d: %s", code, out)
	}
}

// stopGateway stops the gateway as its operator would (SIGTERM): it ends
// its requests and seals what is left, and its store is quiet after.
func (d *drill) stopGateway() {
	d.t.Helper()
	if err := d.gw.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		d.t.Fatal(err)
	}
	select {
	case err := <-d.gw.Done:
		if err != nil {
			d.t.Fatalf("gateway stopped with %v; logs %v", err, d.gw.Logs())
		}
	case <-time.After(20 * time.Second):
		d.t.Fatal("the gateway did not stop on SIGTERM")
	}
}

// story is what one drill story must leave in the log: its operation's
// transitions, in order, and exactly so many of each batched kind, every
// event carrying the story's run and principal.
type story struct {
	name, op, run string
	transitions   []audit.Kind
	batched       map[audit.Kind]int
	check         func(t *testing.T, events []audit.Event) // what else its events say
}

func (s story) size() int {
	n := len(s.transitions)
	for _, c := range s.batched {
		n += c
	}
	return n
}

func (s story) judge(t *testing.T, l auditLog) {
	t.Helper()
	evs := l.of(s.op)
	var kinds []audit.Kind
	for _, e := range transitions(evs) {
		kinds = append(kinds, e.Kind)
	}
	if !slices.Equal(kinds, s.transitions) {
		t.Fatalf("%s: transitions %v, want %v", s.name, kinds, s.transitions)
	}
	for k, n := range s.batched {
		if got := count(evs, k); got != n {
			t.Fatalf("%s: %d %s events, want %d", s.name, got, k, n)
		}
	}
	if len(evs) != s.size() {
		t.Fatalf("%s: %d events, want %d: %+v", s.name, len(evs), s.size(), evs)
	}
	for _, e := range evs {
		if e.RunID != s.run || e.Principal != "agent" || e.Tenant != "acme" {
			t.Fatalf("%s: event %d (%s) has run %q, principal %q, tenant %q", s.name, e.Seq, e.Kind, e.RunID,
				e.Principal, e.Tenant)
		}
	}
	if s.check != nil {
		s.check(t, evs)
	}
}

// only returns the one event of kind.
func only(t *testing.T, evs []audit.Event, kind audit.Kind) audit.Event {
	t.Helper()
	i := slices.IndexFunc(evs, func(e audit.Event) bool { return e.Kind == kind })
	if i < 0 || count(evs, kind) != 1 {
		t.Fatalf("want one %s event: %+v", kind, evs)
	}
	return evs[i]
}

// storyLostAndResolved: the API commits and its answer is lost, so the
// operation is unknown and a retry is answered, not sent; an operator
// then resolves it.
func (d *drill) storyLostAndResolved() story {
	t, run := d.t, []string{"Idempotency-Run", "run-lost"}
	d.fault(`{"drop_response_after_commit":1}`)
	body := ticket("", "Backup job failed")
	want(t, d.keyed("/v1/tickets", "a-lost", body, run...), 502, "outcome_unknown")
	want(t, d.keyed("/v1/tickets", "a-lost", body, run...), 409, "outcome_unknown")
	op := d.operation("a-lost")
	if r := d.control("POST", "/operations/"+op.ID+"/resolve",
		`{"state":"succeeded","note":"the ticket exists"}`); r.status != 200 {
		t.Fatalf("resolve: %+v", r)
	}
	return story{name: "lost response, resolved", op: op.ID, run: "run-lost",
		transitions: []audit.Kind{audit.Forwarded, audit.Unknown, audit.Resolved},
		batched:     map[audit.Kind]int{audit.Received: 1},
		check: func(t *testing.T, evs []audit.Event) {
			if r := only(t, evs, audit.Resolved); r.Actor != "operator" || r.From != "unknown" || r.To != "succeeded" ||
				r.Reason != "the ticket exists" {
				t.Fatalf("resolved event %+v", r)
			}
		}}
}

const (
	traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	traceID     = "4bf92f3577b34da6a3ce929d0e0e4736"
)

// storyReplay: the same request twice: one forwarding, then a replay
// naming the answer given (status, reference, digest), never a creation.
func (d *drill) storyReplay() story {
	t, h := d.t, []string{"Idempotency-Run", "run-replay", "traceparent", traceparent}
	body := ticket("", "Queue backlog on ingest")
	first := d.keyed("/v1/tickets", "a-replay", body, h...)
	second := d.keyed("/v1/tickets", "a-replay", body, h...)
	if first.status != 201 || second.body != first.body || second.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("first %+v\nsecond %+v", first, second)
	}
	var created struct{ ID int64 }
	if err := json.Unmarshal([]byte(first.body), &created); err != nil {
		t.Fatal(err)
	}
	return story{name: "replay", op: d.operation("a-replay").ID, run: "run-replay",
		transitions: []audit.Kind{audit.Forwarded, audit.Succeeded},
		batched:     map[audit.Kind]int{audit.Replayed: 1},
		check: func(t *testing.T, evs []audit.Event) {
			for _, e := range []audit.Event{only(t, evs, audit.Succeeded), only(t, evs, audit.Replayed)} {
				if e.UpstreamStatus != 201 || e.ResultRef != fmt.Sprint(created.ID) ||
					e.ResponseSHA256 != hashOf(first.body) || e.TraceID != traceID || e.Target != "POST /v1/tickets" {
					t.Fatalf("%s event does not name the answer given: %+v", e.Kind, e)
				}
			}
		}}
}

// storyConflict: a changed payload under the key is refused, and the log
// keeps the retry's fingerprint beside the operation's.
func (d *drill) storyConflict() story {
	t, run := d.t, []string{"Idempotency-Run", "run-conflict"}
	if r := d.keyed("/v1/tickets", "a-conflict", ticket("", "Certificate expires"), run...); r.status != 201 {
		t.Fatalf("first: %+v", r)
	}
	want(t, d.keyed("/v1/tickets", "a-conflict", ticket("", "Certificate expired"), run...), 422, "fingerprint_mismatch")
	return story{name: "conflict", op: d.operation("a-conflict").ID, run: "run-conflict",
		transitions: []audit.Kind{audit.Forwarded, audit.Succeeded},
		batched:     map[audit.Kind]int{audit.Conflict: 1},
		check: func(t *testing.T, evs []audit.Event) {
			fw, c := only(t, evs, audit.Forwarded), only(t, evs, audit.Conflict)
			if c.Fingerprint == "" || c.Fingerprint == fw.Fingerprint || !strings.Contains(c.Reason, fw.Fingerprint) {
				t.Fatalf("conflict %+v against the operation's %+v", c, fw)
			}
		}}
}

// storyApproval: a production deploy waits, alice approves it, the retry
// runs it once.
func (d *drill) storyApproval() story {
	t, run := d.t, []string{"Idempotency-Run", "run-approval"}
	acc := waiting(t, d.keyed("/v1/deployments", "a-deploy", prodDeploy, run...), "approval_required")
	if r := d.decide("alice", "approve", acc.Approval.ID, ""); r.status != 200 {
		t.Fatalf("approve: %+v", r)
	}
	if r := d.keyed("/v1/deployments", "a-deploy", prodDeploy, run...); r.status != 201 {
		t.Fatalf("retry after approval: %+v", r)
	}
	return story{name: "approval", op: acc.OperationID, run: "run-approval",
		transitions: []audit.Kind{audit.ApprovalRequested, audit.Approved, audit.Forwarded, audit.Succeeded},
		check: func(t *testing.T, evs []audit.Event) {
			if a := only(t, evs, audit.Approved); a.Actor != "alice" || !strings.Contains(a.Reason, acc.Approval.ID) {
				t.Fatalf("approved event %+v", a)
			}
		}}
}

// TestDrillAuditStories: the stories of the drills, each told by the log
// with the right kinds in the right order, under the agent's run; a
// replay or a conflict is never a forwarding, so the forwarded events
// are the effects the API performed; and the export verifies.
func TestDrillAuditStories(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{audit: true, approvalTTL: "15m"})
	stories := []story{d.storyLostAndResolved(), d.storyReplay(), d.storyConflict(), d.storyApproval()}
	n := 0
	for _, s := range stories {
		n += s.size()
	}
	l := d.waitLog(n)
	if len(l.events) != n {
		t.Fatalf("%d events, want %d: %+v", len(l.events), n, l.events)
	}
	for _, s := range stories {
		s.judge(t, l)
	}
	fx := d.effects()
	if fw := count(l.events, audit.Forwarded); fw != fx["tickets_created"]+fx["deployments_started"] || fw != 4 {
		t.Fatalf("%d forwarded events, effects %v", fw, fx)
	}
	d.wantVerified(l.raw, d.checkpointsFile())
	r := d.control("GET", "/audit/checkpoint", "")
	if c, err := audit.OpenCheckpoint([]byte(r.body), d.verifier()); err != nil || c.Size != l.signed() {
		t.Fatalf("latest checkpoint %+v (%v), the export's signed to %d: %+v", c, err, l.signed(), r)
	}
}

// TestDrillAuditNoSecrets: an export holds no request body, no response
// body, no token and no upstream credential, and still verifies.
func TestDrillAuditNoSecrets(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{audit: true})
	secret := []string{token, operatorToken, upstreamCredential}
	post := func(key, body string, status int, headers ...string) reply {
		r := d.keyed("/v1/tickets", key, body, headers...)
		if r.status != status {
			t.Fatalf("%s: %+v", key, r)
		}
		secret = append(secret, body, r.body)
		return r
	}
	body := `{"project":"OPS","title":"Falcon-Zebra-7731 is down","priority":2,"description":"Quokka-Nimbus-4410 saw it"}`
	first := post("s-1", body, 201)
	post("s-1", body, 201) // a replay
	post("s-1", strings.ReplaceAll(body, "Falcon-Zebra", "Marmot-Vesper"), 422)
	var created struct{ ID int64 }
	if err := json.Unmarshal([]byte(first.body), &created); err != nil {
		t.Fatal(err)
	}
	comment := `{"comment_id":"c-1","body":"Ocelot-Tundra-5512 logs attached"}`
	r := d.send("POST", fmt.Sprintf("/v1/tickets/%d/comments", created.ID), comment, "X-Delivery-Id", "dlv-s1")
	if r.status != 201 {
		t.Fatalf("comment: %+v", r)
	}
	d.fault(`{"drop_response_after_commit":1}`)
	post("s-2", strings.ReplaceAll(body, "Falcon-Zebra", "Heron-Basalt"), 502)
	secret = append(secret, comment, r.body, "Falcon-Zebra", "Quokka-Nimbus", "Marmot-Vesper", "Ocelot-Tundra",
		"Heron-Basalt")
	l := d.waitLog(8) // s-1: forwarded, succeeded, replayed, conflict; the comment: 2; s-2: forwarded, unknown
	files, err := os.ReadFile(d.checkpointsFile())
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secret {
		if bytes.Contains(l.raw, []byte(s)) || bytes.Contains(files, []byte(s)) {
			t.Fatalf("the export or the checkpoints file holds %q:\n%s", s, l.raw)
		}
	}
	d.wantVerified(l.raw)
}

// tally counts a storm's answers by what each must have left in the log.
type tally struct {
	mu sync.Mutex
	n  map[string]int
}

// add classifies an answer: a creation (forwarded and succeeded), a
// replay, a conflict, or an in_progress (received).
func (c *tally) add(t *testing.T, r reply) {
	kind := "unexpected"
	switch {
	case r.err == nil && r.status == 201 && r.header.Get("Idempotent-Replayed") == "true":
		kind = "replayed"
	case r.err == nil && r.status == 201:
		kind = "created"
	case problemCode(r) == "fingerprint_mismatch":
		kind = "conflict"
	case problemCode(r) == "in_progress":
		kind = "received"
	default:
		t.Errorf("a storm request got %d %s (err %v): %s", r.status, problemCode(r), r.err, r.body)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[kind]++
}

// events is how many events the answers counted must have left.
func (c *tally) events() int {
	return 2*c.n["created"] + c.n["replayed"] + c.n["conflict"] + c.n["received"]
}

// TestDrillAuditStormAcrossInstances: two gateways on one PostgreSQL,
// each with its sealer and the same key, under a storm of keyed requests
// split across them: two copies of a request at once, one on each, a
// changed payload beside them, and retries after. One log comes out:
// every event sealed exactly once, at seq 0..n-1, none left unsealed, and
// one forwarded event per effect the API performed. No owner dies here,
// so the ticket route's lease (30s) is one no heartbeat can miss on a
// loaded machine: with the default 1s, a record held up behind the
// storm's commits found its lease lapsed and answered an honest unknown,
// which this drill does not count.
func TestDrillAuditStormAcrossInstances(t *testing.T) {
	t.Parallel()
	dsn, _ := testenv.PostgresSchema(t)
	d := newDrill(t, setup{storeDSN: dsn, audit: true, ticketLease: "30s"})
	gws := []*testenv.Process{d.gw, d.startGateway(0)}
	d.fault(`{"delay_ms":50}`) // the copies of a key meet while it executes
	const keys = 40
	c := &tally{n: map[string]int{}}
	send := func(gw, k int, title string) {
		c.add(t, do("POST", gws[gw%2].URL+"/v1/tickets", ticket("", title), "Authorization", "Bearer "+token,
			"Idempotency-Key", fmt.Sprintf("storm-%d", k)))
	}
	concurrently(keys*3, func(i int) {
		k := i / 3
		switch i % 3 {
		case 0, 1:
			send(k+i%3, k, fmt.Sprintf("storm %d", k))
		default:
			send(k, k, fmt.Sprintf("storm %d, changed", k))
		}
	})
	concurrently(keys*2, func(i int) { send(i, i/2, fmt.Sprintf("storm %d", i/2)) })
	d.fault(`{"delay_ms":0}`)
	if t.Failed() || c.n["created"] != keys {
		t.Fatalf("answers %v, want %d created", c.n, keys)
	}
	l := d.waitLog(c.events())
	if standFor(l.events) != c.events() {
		t.Fatalf("%d events, want %d for the answers %v", len(l.events), c.events(), c.n)
	}
	d.wantEffects("tickets_created", keys)
	onePerOperation(t, l, keys)
	total, unsealed, seqs := postgresEvents(t, dsn)
	if total != len(l.events) || unsealed != 0 || seqs != total {
		t.Fatalf("the store holds %d events, %d unsealed, %d distinct positions; the export %d",
			total, unsealed, seqs, len(l.events))
	}
	d.wantVerified(l.raw, d.checkpointsFile())
	t.Logf("answers %v: %d events, %d checkpoints", c.n, len(l.events), len(l.cps))
}

// onePerOperation checks that the log forwarded each of ops operations
// exactly once.
func onePerOperation(t *testing.T, l auditLog, ops int) {
	t.Helper()
	forwarded := map[string]int{}
	for _, e := range l.events {
		if e.Kind == audit.Forwarded {
			forwarded[e.OperationID]++
		}
	}
	if len(forwarded) != ops {
		t.Fatalf("%d operations forwarded, want %d", len(forwarded), ops)
	}
	for op, n := range forwarded {
		if n != 1 {
			t.Fatalf("operation %s forwarded %d times", op, n)
		}
	}
}

// postgresEvents counts the tenant's events in the store: all, unsealed,
// and distinct positions.
func postgresEvents(t *testing.T, dsn string) (total, unsealed, seqs int) {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE seq IS NULL), count(DISTINCT seq)
		FROM idem_audit_events WHERE tenant = 'acme'`).Scan(&total, &unsealed, &seqs); err != nil {
		t.Fatal(err)
	}
	return total, unsealed, seqs
}

// auditLoad sends new keys, and a retry of every third, from workers until
// stop is closed, to whichever gateway url names (a restart swaps it under
// them). wait returns once every worker has stopped.
func auditLoad(url *atomic.Pointer[string], workers int, stop <-chan struct{}, sent *atomic.Int64) (wait func()) {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%d", w, i)
				for range 1 + min(i%3, 1) {
					r := do("POST", *url.Load()+"/v1/tickets", ticket("", key), "Authorization", "Bearer "+token,
						"Idempotency-Key", key, "Idempotency-Run", fmt.Sprintf("run-w%d", w))
					if r.err != nil {
						time.Sleep(20 * time.Millisecond) // the gateway is down: a client backs off
					}
				}
				sent.Add(1)
			}
		}()
	}
	return wg.Wait
}

// storeRow runs a query on the drill's SQLite store and scans its one row.
func (d *drill) storeRow(query string, dest ...any) {
	d.t.Helper()
	db := d.openStore()
	defer db.Close()
	if err := db.QueryRow(query).Scan(dest...); err != nil {
		d.t.Fatalf("%s: %v", query, err)
	}
}

func (d *drill) openStore() *sql.DB {
	d.t.Helper()
	db, err := sql.Open("sqlite", "file:"+d.storeDB+"?_pragma=busy_timeout(10000)")
	if err != nil {
		d.t.Fatal(err)
	}
	return db
}

// storedOp is an operation as the store keeps it.
type storedOp struct {
	state    string
	attempts int
}

func (d *drill) storedOps() map[string]storedOp {
	d.t.Helper()
	db := d.openStore()
	defer db.Close()
	rows, err := db.Query(`SELECT id, state, attempts FROM idem_operations WHERE tenant = 'acme'`)
	if err != nil {
		d.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]storedOp{}
	for rows.Next() {
		var id string
		var op storedOp
		if err := rows.Scan(&id, &op.state, &op.attempts); err != nil {
			d.t.Fatal(err)
		}
		out[id] = op
	}
	if err := rows.Err(); err != nil {
		d.t.Fatal(err)
	}
	return out
}

// TestDrillAuditKillWhileSealing: a gateway on SQLite signing a checkpoint
// every 8 events, under continuous load, SIGKILLed twice while it seals,
// restarted each time on the same store and configuration. No transition
// is lost: every operation's transitions chain from none to the state the
// store holds, one forwarded per attempt; every event is sealed; and the
// export verifies against every checkpoint appended to the file, those
// signed before the kills included.
func TestDrillAuditKillWhileSealing(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{audit: true, checkpointEvery: 8})
	var url atomic.Pointer[string]
	url.Store(&d.gw.URL)
	stop := make(chan struct{})
	var sent atomic.Int64
	wait := auditLoad(&url, 4, stop, &sent)
	waitFor(t, "checkpoints before the kills", func() bool { return len(d.checkpointLines(d.checkpointsFile())) >= 3 })
	before := len(d.checkpointLines(d.checkpointsFile()))
	for _, kill := range []func(){d.killOnCheckpoint, d.killWithBacklog} {
		kill()
		gw := d.startGateway(0)
		d.gw = gw
		url.Store(&gw.URL)
		at := sent.Load()
		waitFor(t, "writes after the restart", func() bool { return sent.Load() >= at+40 })
	}
	close(stop)
	wait()
	var executing, total int
	waitFor(t, "the killed owners' leases to lapse", func() bool {
		d.storeRow(`SELECT count(*) FROM idem_operations WHERE state = 'executing'`, &executing)
		return executing == 0
	})
	// The maintenance plane may still write an event after the load
	// stops (a lapsed lease settled): the export is read again until the
	// store's count holds still across it.
	var l auditLog
	for settled := false; !settled; {
		waitFor(t, "every event sealed", func() bool {
			var unsealed int
			d.storeRow(`SELECT count(*), count(*) FILTER (WHERE seq IS NULL) FROM idem_audit_events`, &total, &unsealed)
			return unsealed == 0
		})
		l = d.waitLog(total)
		var now int
		d.storeRow(`SELECT count(*) FROM idem_audit_events`, &now)
		settled = now == total
	}
	d.stopGateway()
	var unsealed int
	d.storeRow(`SELECT count(*), count(*) FILTER (WHERE seq IS NULL) FROM idem_audit_events`, &total, &unsealed)
	if total != len(l.events) || unsealed != 0 {
		t.Fatalf("the store holds %d events, %d unsealed; the export %d", total, unsealed, len(l.events))
	}
	d.judgeTransitions(l, d.storedOps())
	if got := len(d.checkpointLines(d.checkpointsFile())); before == 0 || got <= before {
		t.Fatalf("%d checkpoints in the file before the kills, %d after", before, got)
	}
	d.wantVerified(l.raw, d.checkpointsFile())
	states := map[string]int{}
	for _, op := range d.storedOps() {
		states[op.state]++
	}
	t.Logf("operations %v, %d events, %d checkpoints (%d before the kills)", states, len(l.events), len(l.cps), before)
}

// killOnCheckpoint SIGKILLs the gateway the moment its sealer appends a
// checkpoint to the file: in the middle of its work, where the file and
// the store it has just committed to can part.
func (d *drill) killOnCheckpoint() {
	d.t.Helper()
	size := func() int64 {
		fi, err := os.Stat(d.checkpointsFile())
		if err != nil {
			d.t.Fatal(err)
		}
		return fi.Size()
	}
	was := size()
	for deadline := time.Now().Add(20 * time.Second); size() == was; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			d.t.Fatal("no checkpoint appended in 20s")
		}
	}
	d.gw.Kill()
}

// killWithBacklog SIGKILLs the gateway while events wait for its sealer.
func (d *drill) killWithBacklog() {
	d.t.Helper()
	waitFor(d.t, "events for the sealer to seal", func() bool {
		var unsealed int
		d.storeRow(`SELECT count(*) FROM idem_audit_events WHERE seq IS NULL`, &unsealed)
		return unsealed > 0
	})
	d.gw.Kill()
}

// judgeTransitions checks the log against the store's operations: no
// event of an operation the store does not hold; each operation's
// transitions chain from none to its state, one forwarded per attempt;
// and the effects lie between the operations succeeded and those
// forwarded (a gateway killed between forwarding and the API's commit).
func (d *drill) judgeTransitions(l auditLog, ops map[string]storedOp) {
	t := d.t
	t.Helper()
	for _, e := range l.events {
		if _, ok := ops[e.OperationID]; !ok {
			t.Fatalf("event %d tells of operation %q, which the store does not hold", e.Seq, e.OperationID)
		}
	}
	succeeded, forwarded := 0, 0
	for id, op := range ops {
		state, n := chain(t, id, transitions(l.of(id)))
		if state != op.state || n != op.attempts {
			t.Fatalf("operation %s is %s after %d attempts; its events end %q after %d forwarded",
				id, op.state, op.attempts, state, n)
		}
		forwarded += n
		if op.state == "succeeded" {
			succeeded++
		}
	}
	if fx := d.effects()["tickets_created"]; fx < succeeded || fx > forwarded {
		t.Fatalf("%d effects for %d operations succeeded and %d forwarded", fx, succeeded, forwarded)
	}
}

// chain follows an operation's transitions from none, each leaving the
// state the one before it entered, and returns the state they end in and
// how many were forwardings. A gap is a lost transition.
func chain(t *testing.T, id string, evs []audit.Event) (state string, forwarded int) {
	t.Helper()
	for _, e := range evs {
		if e.To == "" { // an approval's decision moves no state
			continue
		}
		if e.From != state {
			t.Fatalf("operation %s: event %d (%s) leaves %q, but the transition before it entered %q: one is lost",
				id, e.Seq, e.Kind, e.From, state)
		}
		state = e.To
		if e.Kind == audit.Forwarded {
			forwarded++
		}
	}
	return state, forwarded
}

// checkpointLines reads a checkpoints file's lines.
func (d *drill) checkpointLines(path string) []string {
	d.t.Helper()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		d.t.Fatal(err)
	}
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimRight(string(b), "\n"), "\n")
}

// stmt is one statement of a tampering, run on the stopped gateway's
// store as its database administrator could.
type stmt struct {
	query string
	args  []any
}

// tampering is one way to rewrite history in the store, and what verify
// must say of a fresh export of it.
type tampering struct {
	name    string
	edit    []stmt
	earlier []string // checkpoint files kept from before the edit
	// want is in verify's message, whose range of suspect events must
	// hold seq (unless -1).
	want string
	seq  int64
	// aloneOK says the export verifies without the earlier files: only
	// the checkpoints kept outside the database catch the edit.
	aloneOK bool
}

// TestDrillAuditTampering: a sealed, checkpointed log on SQLite, then
// history rewritten in the stopped gateway's store, one way at a time from
// a pristine copy: a byte flipped in an event's field, two events' places
// swapped, an event deleted (and the log renumbered to hide it), the tail
// cut behind a checkpoint the file kept, a checkpoint re-signed by another
// key, and a second root for a signed size. Each fresh export fails
// `idemgate audit verify`, which names the events or the fault.
func TestDrillAuditTampering(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{audit: true, checkpointEvery: 4})
	var l auditLog
	for i := range 6 {
		for range 2 { // a creation and a replay: transitions and batched events
			if r := d.keyed("/v1/tickets", fmt.Sprintf("t-%d", i), ticket("", fmt.Sprint("tamper ", i)),
				"Idempotency-Run", "run-tamper"); r.status != 201 {
				t.Fatalf("t-%d: %+v", i, r)
			}
		}
		l = d.waitLog(3 * (i + 1)) // a checkpoint each time: the suspects' ranges stay short
	}
	d.stopGateway()
	if len(l.cps) < 3 {
		t.Fatalf("%d checkpoints; the drill needs some before the last", len(l.cps))
	}
	pristine := d.snapshot()
	parent := d.t
	for _, c := range d.tamperings(l, pristine) {
		t.Run(c.name, func(t *testing.T) {
			d.t = t
			defer func() { d.t = parent }()
			d.tampered(c, pristine)
		})
	}
}

// tamperings are the edits of the drill, chosen on the log l.
func (d *drill) tamperings(l auditLog, pristine string) []tampering {
	sizes := make([]int64, 0, len(l.cps))
	for _, c := range l.cps {
		sizes = append(sizes, c.Size)
	}
	slices.Sort(sizes)
	withReason := slices.IndexFunc(l.events, func(e audit.Event) bool { return e.Seq > 3 && e.Reason != "" })
	cut, last := sizes[len(sizes)-2], sizes[len(sizes)-1]
	const where = ` WHERE tenant = 'acme' AND seq = ?`
	return []tampering{
		{name: "pristine", want: "", seq: -1, earlier: []string{filepath.Join(pristine, "checkpoints.jsonl")}},
		{name: "key flipped", edit: []stmt{{`UPDATE idem_audit_events SET key = ?` + where, []any{flip(l.events[2].Key), 2}}},
			want: "do not hash to the root", seq: 2},
		{name: "reason flipped", edit: []stmt{{`UPDATE idem_audit_events SET reason = ?` + where,
			[]any{flip(l.events[withReason].Reason), withReason}}}, want: "do not hash to the root", seq: int64(withReason)},
		{name: "two swapped", edit: []stmt{{`UPDATE idem_audit_events SET seq = -1` + where, []any{3}},
			{`UPDATE idem_audit_events SET seq = 3` + where, []any{7}},
			{`UPDATE idem_audit_events SET seq = 7` + where, []any{-1}}}, want: "do not hash to the root", seq: 3},
		{name: "one deleted", edit: []stmt{{`DELETE FROM idem_audit_events` + where, []any{5}}},
			want: "events 5 to 5 are missing (deleted)", seq: -1},
		{name: "one deleted, the rest renumbered", edit: renumbered(5), want: "do not hash to the root", seq: 5},
		{name: "tail cut behind a kept checkpoint", edit: []stmt{
			{`DELETE FROM idem_audit_events WHERE tenant = 'acme' AND seq >= ?`, []any{cut}},
			{`DELETE FROM idem_audit_checkpoints WHERE tenant = 'acme' AND size > ?`, []any{cut}},
			{`UPDATE idem_audit_heads SET size = ?, checkpoint_size = ? WHERE tenant = 'acme'`, []any{cut, cut}}},
			earlier: []string{filepath.Join(pristine, "checkpoints.jsonl")}, aloneOK: true,
			want: fmt.Sprintf("the export ends at %d events, but a checkpoint", cut), seq: -1},
		{name: "checkpoint signed by another key", edit: []stmt{{`UPDATE idem_audit_checkpoints SET signed = ?
			WHERE tenant = 'acme' AND size = ?`, []any{d.foreignCheckpoint(l, last), last}}},
			want: "checkpoint not signed by this key", seq: -1},
		{name: "two roots for one size", earlier: []string{d.forkedCheckpoint(l, sizes[0])},
			want: fmt.Sprintf("two checkpoints of size %d with different roots", sizes[0]), seq: -1},
	}
}

// flip flips the lowest bit of a value's last byte: one byte changed,
// still printable ASCII for the letters and digits the drill writes.
func flip(v string) string {
	b := []byte(v)
	b[len(b)-1] ^= 1
	return string(b)
}

// renumbered deletes event k and moves every later one down a place, as
// an administrator hiding the deletion would (through negative positions:
// the positions stay unique at every row).
func renumbered(k int64) []stmt {
	return []stmt{{`DELETE FROM idem_audit_events WHERE tenant = 'acme' AND seq = ?`, []any{k}},
		{`UPDATE idem_audit_events SET seq = -seq WHERE tenant = 'acme' AND seq > ?`, []any{k}},
		{`UPDATE idem_audit_events SET seq = -seq - 1 WHERE tenant = 'acme' AND seq < 0`, nil},
		{`UPDATE idem_audit_heads SET size = size - 1 WHERE tenant = 'acme'`, nil}}
}

// foreignCheckpoint is the log's true checkpoint of size, signed by a key
// of another (made with `idemgate audit keygen`, of the same name).
func (d *drill) foreignCheckpoint(l auditLog, size int64) string {
	d.t.Helper()
	key := filepath.Join(d.dir, "foreign.key")
	if out, err := exec.Command(binary, "audit", "keygen", key).CombinedOutput(); err != nil {
		d.t.Fatalf("audit keygen: %v: %s", err, out)
	}
	return string(d.sign(key, d.checkpointOf(l, size)))
}

// forkedCheckpoint writes a checkpoints file holding a checkpoint of size
// with another root, signed by the log's own key: the log forked.
func (d *drill) forkedCheckpoint(l auditLog, size int64) string {
	d.t.Helper()
	c := d.checkpointOf(l, size)
	c.Root[0] ^= 1
	line, err := audit.CheckpointLine(d.sign(d.auditKey(), c))
	if err != nil {
		d.t.Fatal(err)
	}
	path := filepath.Join(d.dir, "forked.jsonl")
	if err := os.WriteFile(path, append(line, '\n'), 0o644); err != nil {
		d.t.Fatal(err)
	}
	return path
}

func (d *drill) checkpointOf(l auditLog, size int64) audit.Checkpoint {
	d.t.Helper()
	i := slices.IndexFunc(l.cps, func(c audit.Checkpoint) bool { return c.Size == size })
	if i < 0 {
		d.t.Fatalf("no checkpoint of size %d", size)
	}
	return l.cps[i]
}

func (d *drill) sign(key string, c audit.Checkpoint) []byte {
	d.t.Helper()
	s, err := audit.LoadSigner(key)
	if err != nil {
		d.t.Fatal(err)
	}
	b, err := c.Sign(s)
	if err != nil {
		d.t.Fatal(err)
	}
	return b
}

// tampered edits a pristine copy of the store, exports it from a gateway
// started on it, and judges verify's verdict.
func (d *drill) tampered(c tampering, pristine string) {
	t := d.t
	d.restore(pristine)
	d.editStore(c.edit)
	d.gw = d.startGateway(0)
	raw, err := d.fetchExport()
	d.stopGateway()
	if err != nil {
		t.Fatal(err)
	}
	if c.want == "" {
		d.wantVerified(raw, c.earlier...)
		return
	}
	if c.aloneOK {
		d.wantVerified(raw)
	}
	out, code := d.verify(raw, c.earlier...)
	if code != 3 || !strings.Contains(out, c.want) {
		t.Fatalf("audit verify exited %d, want 3 and %q: %s", code, c.want, out)
	}
	if c.seq >= 0 {
		var from, to int64
		_, rest, _ := strings.Cut(out, "an event from ")
		if _, err := fmt.Sscanf(rest, "%d to %d", &from, &to); err != nil || c.seq < from || c.seq > to {
			t.Fatalf("verify's message does not hold event %d: %s", c.seq, out)
		}
	}
	t.Logf("%s", strings.TrimSpace(out))
}

// editStore runs a tampering's statements in one transaction.
func (d *drill) editStore(edit []stmt) {
	d.t.Helper()
	db := d.openStore()
	defer db.Close()
	tx, err := db.Begin()
	if err != nil {
		d.t.Fatal(err)
	}
	defer tx.Rollback()
	for _, s := range edit {
		if res, err := tx.Exec(s.query, s.args...); err != nil {
			d.t.Fatalf("%s: %v", s.query, err)
		} else if n, err := res.RowsAffected(); err != nil || n == 0 {
			d.t.Fatalf("%s %v changed nothing (%v)", s.query, s.args, err)
		}
	}
	if err := tx.Commit(); err != nil {
		d.t.Fatal(err)
	}
}

// storeFiles are what a gateway on SQLite leaves: the database, its WAL
// and shared memory if a close left them, and the checkpoints file.
func (d *drill) storeFiles() []string {
	return []string{d.storeDB, d.storeDB + "-wal", d.storeDB + "-shm", d.checkpointsFile()}
}

// snapshot copies the stopped gateway's files aside; restore puts them
// back, so that every tampering starts from the log it left.
func (d *drill) snapshot() string {
	d.t.Helper()
	dir := filepath.Join(d.dir, "pristine")
	if err := os.Mkdir(dir, 0o700); err != nil {
		d.t.Fatal(err)
	}
	for _, f := range d.storeFiles() {
		copyIfExists(d.t, f, filepath.Join(dir, filepath.Base(f)))
	}
	return dir
}

func (d *drill) restore(dir string) {
	d.t.Helper()
	for _, f := range d.storeFiles() {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			d.t.Fatal(err)
		}
		copyIfExists(d.t, filepath.Join(dir, filepath.Base(f)), f)
	}
}

func copyIfExists(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err == nil {
		err = os.WriteFile(to, b, 0o600)
	}
	if err != nil {
		t.Fatal(err)
	}
}
