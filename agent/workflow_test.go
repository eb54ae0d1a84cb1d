package agent

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
)

// dossier is the workflow article's dossier_42:v5: four effects, each a
// write of its own.
func dossier() Workflow {
	return Workflow{Intent: "dossier_42:v5", Steps: []Step{
		{Name: "make-pdf", Method: "POST", Path: "/v1/pdfs", Body: []byte(`{"dossier":42}`)},
		{Name: "store-pdf", Method: "PUT", Path: "/v1/files/dossier-42.pdf", Body: []byte(`{"from":"pdf"}`)},
		{Name: "send-link", Method: "POST", Path: "/v1/messages", Body: []byte(`{"to":"client"}`)},
		{Name: "write-crm", Method: "PATCH", Path: "/v1/crm/42", Body: []byte(`{"stage":"sent"}`)},
	}}
}

// lookups answers the gateway's lookups by key from states (404 for a key
// it does not hold), and records every key asked about.
type lookups struct {
	mu     sync.Mutex
	states map[string]string
	asked  []string
}

func (l *lookups) handler(w http.ResponseWriter, r *http.Request) {
	key := r.URL.Query().Get("key")
	l.mu.Lock()
	l.asked = append(l.asked, key)
	state := l.states[key]
	l.mu.Unlock()
	lookupSays(state)(w, r)
}

func (l *lookups) set(key, state string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.states[key] = state
}

func (l *lookups) keys() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.asked)
}

// sentKeys is the Idempotency-Key of every write the script received.
func sentKeys(s *script) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys []string
	for _, h := range s.sends {
		keys = append(keys, h.Get("Idempotency-Key"))
	}
	return keys
}

// stepKeys is each step's key as the journal holds it, in order.
func stepKeys(t *testing.T, c *Client, w Workflow) []string {
	t.Helper()
	var keys []string
	for _, s := range w.Steps {
		intent, err := StepIntent(w.Intent, s.Name)
		if err != nil {
			t.Fatal(err)
		}
		e, err := c.Journal.Latest(context.Background(), intent)
		if err != nil {
			t.Fatalf("step %s: %v", s.Name, err)
		}
		keys = append(keys, e.Key)
	}
	return keys
}

// Each step runs under "<intent>/<step>", with that intent's own key: four
// steps, four keys, each sent with its own step, in order.
func TestWorkflowStepsHaveDerivedKeys(t *testing.T) {
	s := &script{answers: []http.HandlerFunc{status(201)}, lookup: lookupSays("")}
	c, _ := newScripted(t, s)
	w := dossier()
	out, err := c.RunWorkflow(context.Background(), w)
	if err != nil || !out.Done || out.StoppedAt != "" || len(out.Steps) != 4 {
		t.Fatalf("%+v %v", out, err)
	}
	keys := stepKeys(t, c, w)
	if got := sentKeys(s); !slices.Equal(got, keys) {
		t.Fatalf("sent keys %v, want the steps' journaled keys in order %v", got, keys)
	}
	if len(slices.Compact(slices.Sorted(slices.Values(keys)))) != 4 {
		t.Fatalf("steps share keys: %v", keys)
	}
	for i, st := range out.Steps {
		want := "dossier_42:v5/" + w.Steps[i].Name
		if st.Name != w.Steps[i].Name || !st.Ran || st.Skipped || st.Outcome.Kind != Created ||
			st.Outcome.Intent != want || st.Outcome.Key != keys[i] {
			t.Fatalf("step %d: %+v, want created under %s", i+1, st, want)
		}
	}
	// Do on the derived intent is that step, with its key (what call
	// --step and the MCP step argument send).
	intent, _ := StepIntent(w.Intent, "send-link")
	if e, _, err := c.Prepare(context.Background(), Action{Intent: intent, Method: "POST", Path: "/v1/messages",
		Body: []byte(`{"to":"client"}`)}); err != nil || e.Key != keys[2] {
		t.Fatalf("the step's intent has another key: %+v %v", e, err)
	}
}

// Steps the journal holds succeeded are skipped: a second run of a done
// workflow sends nothing, not even a lookup.
func TestWorkflowSkipsSucceededSteps(t *testing.T) {
	l := &lookups{states: map[string]string{}}
	s := &script{answers: []http.HandlerFunc{status(201), status(200, "Idempotent-Replayed", "true")},
		lookup: l.handler}
	c, _ := newScripted(t, s)
	if out, err := c.RunWorkflow(context.Background(), dossier()); err != nil || !out.Done {
		t.Fatalf("%+v %v", out, err)
	}
	sends, asked := s.count(), len(l.keys())
	out, err := c.RunWorkflow(context.Background(), dossier())
	if err != nil || !out.Done || !strings.Contains(out.Reason, "4 before this run, skipped") {
		t.Fatalf("%+v %v", out, err)
	}
	for _, st := range out.Steps {
		if !st.Skipped || st.Ran || !st.Succeeded() {
			t.Fatalf("step %+v, want skipped", st)
		}
	}
	if s.count() != sends || len(l.keys()) != asked {
		t.Fatalf("a done workflow sent %d writes and %d lookups", s.count()-sends, len(l.keys())-asked)
	}
}

// The agent stops while step 3 is in flight; a new client on the same
// journal file (a restarted process) skips steps 1 and 2, asks the gateway
// about step 3 before anything else (it succeeded: the resend fetches its
// stored answer), and runs step 4. No write of steps 1 and 2 is sent again.
func TestWorkflowResumesAfterACrash(t *testing.T) {
	ctx, crash := context.WithCancel(context.Background())
	defer crash()
	interrupted := func(w http.ResponseWriter, r *http.Request) { crash(); lost(w, r) }
	l := &lookups{states: map[string]string{}}
	s := &script{answers: []http.HandlerFunc{status(201), status(201), interrupted,
		status(200, "Idempotent-Replayed", "true"), status(201)}, lookup: l.handler}
	c, _ := newScripted(t, s)
	w := dossier()
	out, err := c.RunWorkflow(ctx, w)
	if !errors.Is(err, context.Canceled) || out.StoppedAt != "send-link" || out.Done {
		t.Fatalf("interrupted run: %+v %v", out, err)
	}
	if !out.Steps[0].Succeeded() || !out.Steps[1].Succeeded() || !out.Steps[2].Ran || out.Steps[3].Ran {
		t.Fatalf("interrupted run: %+v", out.Steps)
	}
	keys := stepKeys(t, c, w)
	l.set(keys[2], "succeeded") // the gateway performed step 3; the agent never heard

	j, err := OpenJournal(context.Background(), c.Journal.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	restarted := &Client{BaseURL: c.BaseURL, Token: c.Token, Journal: j, Clock: c.Clock}
	out, err = restarted.RunWorkflow(context.Background(), w)
	if err != nil || !out.Done {
		t.Fatalf("resume: %+v %v", out, err)
	}
	if got := sentKeys(s)[3:]; !slices.Equal(got, keys[2:]) {
		t.Fatalf("the resume sent %v, want only steps 3 and 4 %v", got, keys[2:])
	}
	if got := l.keys(); !slices.Equal(got, keys[2:3]) {
		t.Fatalf("the resume asked about %v, want only step 3 %v", got, keys[2:3])
	}
	st := out.Steps
	if !st[0].Skipped || !st[1].Skipped || st[2].Outcome.Kind != Replayed || st[3].Outcome.Kind != Created {
		t.Fatalf("resume: %+v", st)
	}
}

// The run stops at the first step that does not succeed, says which and
// why, and sends nothing after it; a step left unknown is asked about on
// resume, never re-sent, and the run stays stopped there.
func TestWorkflowStopsAtAFailingStep(t *testing.T) {
	for name, c := range map[string]struct {
		answer http.HandlerFunc
		kind   Kind
		reason string
	}{
		"rejected": {problemAnswer(422, "invalid_command"), Rejected, "invalid_command"},
		"unknown":  {problemAnswer(409, "outcome_unknown"), Unknown, "outcome_unknown"},
	} {
		t.Run(name, func(t *testing.T) {
			l := &lookups{states: map[string]string{}}
			s := &script{answers: []http.HandlerFunc{status(201), status(201), c.answer, status(201)}, lookup: l.handler}
			client, _ := newScripted(t, s)
			out, err := client.RunWorkflow(context.Background(), dossier())
			if err != nil || out.Done || out.StoppedAt != "send-link" || s.count() != 3 {
				t.Fatalf("%+v %v (%d sends)", out, err, s.count())
			}
			want := `step "send-link" is ` + string(c.kind)
			if !strings.HasPrefix(out.Reason, want) || !strings.Contains(out.Reason, c.reason) {
				t.Fatalf("reason %q, want %q and %q", out.Reason, want, c.reason)
			}
			if st := out.Steps[3]; st.Ran || st.Skipped || st.Outcome.Kind != "" || st.Outcome.Key == "" {
				t.Fatalf("step 4 %+v: want journaled, not run", st)
			}
			if c.kind != Unknown {
				return
			}
			l.set(stepKeys(t, client, dossier())[2], "unknown")
			out, err = client.RunWorkflow(context.Background(), dossier())
			if err != nil || out.StoppedAt != "send-link" || out.Steps[2].Outcome.Kind != Unknown || s.count() != 3 {
				t.Fatalf("resume of an unknown step: %+v %v (%d sends)", out, err, s.count())
			}
		})
	}
}

// A step whose request changed under the same workflow intent refuses the
// whole run before anything is sent, as Do refuses a changed resume.
func TestWorkflowChangedStepPayload(t *testing.T) {
	l := &lookups{states: map[string]string{}}
	s := &script{answers: []http.HandlerFunc{status(201), status(201), problemAnswer(503, "store_unavailable")},
		lookup: l.handler}
	c, _ := newScripted(t, s)
	c.Policy.MaxAttempts = 1
	if out, err := c.RunWorkflow(context.Background(), dossier()); err != nil || out.StoppedAt != "send-link" {
		t.Fatalf("%+v %v", out, err)
	}
	sends, asked := s.count(), len(l.keys())
	for i := range 4 { // a succeeded step, the stopped one, and one never sent
		w := dossier()
		w.Steps[i].Body = []byte(`{"changed":true}`)
		if _, err := c.RunWorkflow(context.Background(), w); !errors.Is(err, ErrPayloadChanged) ||
			!strings.Contains(err.Error(), w.Steps[i].Name) {
			t.Fatalf("step %d changed: %v, want ErrPayloadChanged naming it", i+1, err)
		}
	}
	if s.count() != sends || len(l.keys()) != asked {
		t.Fatalf("a changed workflow sent %d writes and %d lookups", s.count()-sends, len(l.keys())-asked)
	}
}

// Bad workflows are refused before anything is journaled or sent.
func TestWorkflowRefusesBadSteps(t *testing.T) {
	named := func(names ...string) Workflow {
		w := Workflow{Intent: "w"}
		for _, n := range names {
			w.Steps = append(w.Steps, Step{Name: n, Method: "POST", Path: "/v1/x"})
		}
		return w
	}
	noIntent := named("a")
	noIntent.Intent = ""
	badPath := named("a", "b")
	badPath.Steps[1].Path = "v1/x"
	for name, c := range map[string]struct {
		w    Workflow
		step bool // refused as a step name
	}{
		"no intent": {noIntent, false}, "no steps": {named(), false}, "bad path": {badPath, false},
		"empty name": {named("a", ""), true}, "slash": {named("a", "b/c"), true}, "hash": {named("a", "b#2"), true},
		"space": {named("a", "b c"), true}, "twice": {named("a", "b", "a"), true},
		"too long": {named(strings.Repeat("s", 65)), true},
	} {
		s := &script{answers: []http.HandlerFunc{status(201)}, lookup: lookupSays("")}
		client, _ := newScripted(t, s)
		_, err := client.RunWorkflow(context.Background(), c.w)
		if !errors.Is(err, ErrInvalidAction) || c.step != errors.Is(err, ErrInvalidStep) {
			t.Errorf("%s: %v", name, err)
		}
		if p, _ := client.Journal.Pending(context.Background()); len(p) != 0 || s.count() != 0 {
			t.Errorf("%s: journaled %d, sent %d", name, len(p), s.count())
		}
	}
	if err := CheckStepName("make-pdf_v2.1:a"); err != nil {
		t.Fatal(err)
	}
}
