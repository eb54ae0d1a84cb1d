package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/agent"
	"github.com/idemgate/idemgate/ledger"
)

// Test 11 of the workflow article, "un effet réussit et le suivant
// échoue": a workflow of four steps (the article's dossier_42:v5, one
// ticket per effect) through the real gateway in front of the naive ops
// API, which honours no key: only the gateway and the agent's journal
// stand between a resume and a second effect. Effects are counted at the
// API, per step, by the tickets it holds.

// dossierTitles are the four steps' tickets, in order.
var dossierTitles = []string{"Make the PDF of dossier 42", "Store the PDF", "Send the link", "Write the CRM"}

func dossierWorkflow() agent.Workflow {
	w := agent.Workflow{Intent: "dossier_42:v5"}
	for i, name := range []string{"make-pdf", "store-pdf", "send-link", "write-crm"} {
		w.Steps = append(w.Steps, agent.Step{Name: name, Method: "POST", Path: "/v1/tickets",
			Body: []byte(ticket("", dossierTitles[i]))})
	}
	return w
}

// writes is an agent's transport: it records the key of every write it
// sends, and arms a fault at the API just before its armAt-th write leaves,
// so that the fault meets that step and no other.
type writes struct {
	d     *drill
	mu    sync.Mutex
	keys  []string
	armAt int
	spec  string
}

func (w *writes) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Method != http.MethodGet {
		w.mu.Lock()
		w.keys = append(w.keys, r.Header.Get("Idempotency-Key"))
		n := len(w.keys)
		w.mu.Unlock()
		if n == w.armAt {
			w.d.fault(w.spec)
		}
	}
	return noReuse.Transport.RoundTrip(r)
}

func (w *writes) sent() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.keys)
}

// agentOn is a new agent on the journal file, as a restarted process is:
// its own handle on the file, its own run, only what the file holds.
func (d *drill) agentOn(journal string, w *writes) *agent.Client {
	j, err := agent.OpenJournal(context.Background(), journal)
	if err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() { j.Close() })
	return &agent.Client{BaseURL: d.gw.URL, Token: token, Journal: j, Policy: agent.Policy{MaxAttempts: 2},
		HTTP: &http.Client{Transport: w, Timeout: 20 * time.Second}}
}

// tickets are the titles of the tickets the API holds, in the order it
// made them: one per effect.
func (d *drill) tickets() []string {
	d.t.Helper()
	var titles []string
	for id := 1; id <= d.effects()["tickets_created"]; id++ {
		r := do("GET", fmt.Sprintf("%s/v1/tickets/%d", d.api.URL, id), "")
		var tk struct{ Title string }
		if r.err != nil || r.status != 200 || json.Unmarshal([]byte(r.body), &tk) != nil {
			d.t.Fatalf("ticket %d: %+v", id, r)
		}
		titles = append(titles, tk.Title)
	}
	return titles
}

func (d *drill) wantTickets(titles ...string) {
	d.t.Helper()
	if got := d.tickets(); !slices.Equal(got, titles) {
		d.t.Fatalf("the API made tickets %q, want %q: one effect per step that ran", got, titles)
	}
}

// run runs the workflow and checks where it stopped ("" for done).
func runTo(t *testing.T, c *agent.Client, stop string, kind agent.Kind) agent.WorkflowOutcome {
	t.Helper()
	out, err := c.RunWorkflow(context.Background(), dossierWorkflow())
	if err != nil || out.StoppedAt != stop || out.Done != (stop == "") {
		t.Fatalf("want a stop at %q: %+v %v", stop, out, err)
	}
	if stop != "" {
		if i := slices.IndexFunc(out.Steps, func(s agent.StepOutcome) bool { return s.Name == stop }); out.Steps[i].Outcome.Kind != kind ||
			!strings.HasPrefix(out.Reason, fmt.Sprintf("step %q is %s", stop, kind)) {
			t.Fatalf("stopped at %s: %+v, reason %q, want %s", stop, out.Steps[i].Outcome, out.Reason, kind)
		}
	}
	return out
}

// stepKey is a step's key, from an outcome.
func stepKey(out agent.WorkflowOutcome, i int) string { return out.Steps[i].Outcome.Key }

// Case A: step 3 fails (the API says 429, past the agent's retry budget):
// nothing of it was applied, and the run stops there. The resume, by a new
// agent on the same journal, skips steps 1 and 2 without sending them,
// runs step 3 once, then step 4.
func TestWorkflowStepFailsResumeRunsTheRest(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	journal := filepath.Join(d.dir, "journal.db")
	first := &writes{d: d, armAt: 3, spec: `{"status":{"code":429,"count":2}}`}
	out := runTo(t, d.agentOn(journal, first), "send-link", agent.Failed)
	if !out.Steps[2].Outcome.Unfinished || out.Steps[3].Ran || len(first.sent()) != 4 {
		t.Fatalf("the failed run: %+v, writes %v", out.Steps, first.sent())
	}
	d.wantTickets(dossierTitles[:2]...)
	wantState(t, d.operation(stepKey(out, 2)), ledger.Prepared) // released: not applied

	resumed := &writes{d: d}
	out = runTo(t, d.agentOn(journal, resumed), "", "")
	if !out.Steps[0].Skipped || !out.Steps[1].Skipped || out.Steps[2].Outcome.Kind != agent.Created ||
		out.Steps[3].Outcome.Kind != agent.Created {
		t.Fatalf("the resume: %+v", out.Steps)
	}
	if got, want := resumed.sent(), []string{stepKey(out, 2), stepKey(out, 3)}; !slices.Equal(got, want) {
		t.Fatalf("the resume sent %v, want steps 3 and 4 only %v", got, want)
	}
	d.wantTickets(dossierTitles...)
}

// Case B: step 3's answer is lost after the API committed it. The gateway
// holds it unknown, and so does the agent: the run stops, and a resume
// before anyone knows more sends nothing, of step 3 or of step 4. Once an
// operator has found the ticket and resolved step 3 with the API's answer,
// the resume reconciles it (the gateway replays that answer: no second
// effect) and goes on with step 4.
func TestWorkflowStepLosesItsAnswer(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	journal := filepath.Join(d.dir, "journal.db")
	first := &writes{d: d, armAt: 3, spec: `{"drop_response_after_commit":1}`}
	out := runTo(t, d.agentOn(journal, first), "send-link", agent.Unknown)
	d.wantTickets(dossierTitles[:3]...)
	key := stepKey(out, 2)
	op := d.operation(key)
	wantState(t, op, ledger.Unknown)

	early := &writes{d: d}
	runTo(t, d.agentOn(journal, early), "send-link", agent.Unknown)
	if len(early.sent()) != 0 {
		t.Fatalf("a resume of an unknown step sent %v", early.sent())
	}

	found := do("GET", d.api.URL+"/v1/tickets/3", "")
	resolve, _ := json.Marshal(map[string]any{"state": "succeeded", "note": "ticket 3 is the link sent",
		"response": map[string]any{"status": 201, "headers": map[string][]string{"Content-Type": {"application/json"}},
			"body": found.body}})
	if r := d.control("POST", "/operations/"+op.ID+"/resolve", string(resolve)); r.status != 200 {
		t.Fatalf("resolve: %+v", r)
	}
	resumed := &writes{d: d}
	out = runTo(t, d.agentOn(journal, resumed), "", "")
	if s := out.Steps[2]; !s.Ran || s.Outcome.Kind != agent.Replayed || string(s.Outcome.Body) != found.body {
		t.Fatalf("step 3 after the resolution: %+v, want the API's answer replayed: %s", s.Outcome, found.body)
	}
	if !out.Steps[0].Skipped || !out.Steps[1].Skipped || out.Steps[3].Outcome.Kind != agent.Created {
		t.Fatalf("the resume: %+v", out.Steps)
	}
	d.wantTickets(dossierTitles...)
}

// Case C: the agent is a script of idemgate call --step processes, killed
// while step 3 is at the API. The Go client resumes the workflow on the
// same journal: the steps call did are skipped, step 3 is asked about and
// its one answer awaited, and step 4 runs.
func TestWorkflowStepsByCallThenResumedAfterAKill(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{upstreamTimeout: "1m"})
	journal := filepath.Join(d.dir, "journal.db")
	w := dossierWorkflow()
	args := func(i int) []string {
		s := w.Steps[i]
		return []string{"--intent", w.Intent, "--step", s.Name, s.Method, s.Path, "-d", string(s.Body)}
	}
	for i := range 2 {
		if out, code, stderr := d.call(journal, args(i)...); code != 0 || out["kind"] != "created" {
			t.Fatalf("call --step %s: exit %d %v %s", w.Steps[i].Name, code, out, stderr)
		}
	}
	d.hold(1)
	third := d.callCmd(journal, args(2)...)
	if err := third.Start(); err != nil {
		t.Fatal(err)
	}
	d.waitInFlight(1)
	third.Process.Kill()
	third.Wait()
	d.release()

	resumed := &writes{d: d}
	out := runTo(t, d.agentOn(journal, resumed), "", "")
	if !out.Steps[0].Skipped || !out.Steps[1].Skipped || out.Steps[2].Outcome.Kind != agent.Replayed ||
		out.Steps[3].Outcome.Kind != agent.Created {
		t.Fatalf("the resume: %+v", out.Steps)
	}
	if got := resumed.sent(); slices.Contains(got, stepKey(out, 0)) || slices.Contains(got, stepKey(out, 1)) {
		t.Fatalf("the resume sent steps call had done: %v", got)
	}
	d.wantTickets(dossierTitles...)
}
