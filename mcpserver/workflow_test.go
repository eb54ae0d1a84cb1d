package mcpserver_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
)

// submit_write's step makes the write one step of a workflow, run as the
// intent "<intent>/<step>" with its own key; the result names the intent
// and the step as given, so that a retry passes the same two. A workflow
// intent the server never handed out, a bad step name and a repeat of a
// step are tool errors, and nothing is sent; a step without an intent is
// handed a new workflow intent.
func TestSubmitWorkflowStep(t *testing.T) {
	var sends atomic.Int32
	cs, c := connectClient(t, gatewayStub(t, &sends).URL)
	write := map[string]any{"intent": sealed("dossier_42:v5"), "step": "make-pdf", "method": "POST", "path": "/v1/tickets",
		"body": map[string]any{"title": "PDF"}}
	done, _ := call(t, cs, "submit_write", write)
	if done.Kind != "created" || done.Intent != sealed("dossier_42:v5") || done.Step != "make-pdf" || sends.Load() != 1 ||
		!strings.Contains(done.NextStep, `pass intent "`+sealed("dossier_42:v5")+`" and step "make-pdf"`) {
		t.Fatalf("step: %+v, %d sends", done, sends.Load())
	}
	e, err := c.Journal.Latest(context.Background(), "dossier_42:v5/make-pdf")
	if err != nil || e.Attempts != 1 || e.LastKind != "created" {
		t.Fatalf("the step's intent in the journal: %+v %v", e, err)
	}
	if _, err := c.Journal.Latest(context.Background(), "dossier_42:v5"); err == nil {
		t.Fatal("the workflow's own intent was journaled as a write")
	}
	st, _ := call(t, cs, "operation_status", map[string]any{"intent": sealed("dossier_42:v5"), "step": "make-pdf"})
	if st.Intent != sealed("dossier_42:v5") || st.Step != "make-pdf" || !strings.Contains(st.Body, `"op_9"`) {
		t.Fatalf("status of the step: %+v", st)
	}
	for name, change := range map[string]map[string]any{
		"slash": {"step": "a/b"}, "hash": {"step": "a#2"}, "repeat": {"mode": "repeat"},
		"not handed out": {"intent": "dossier_43"},
	} {
		args := map[string]any{}
		for k, v := range write {
			args[k] = v
		}
		for k, v := range change {
			args[k] = v
		}
		if _, res := call(t, cs, "submit_write", args); !res.IsError || sends.Load() != 1 {
			t.Errorf("%s: %v, %d sends", name, fmt.Sprint(res.Content), sends.Load())
		}
	}
	if _, res := call(t, cs, "operation_status", map[string]any{"step": "make-pdf"}); !res.IsError {
		t.Error("status of a step without its intent")
	}
	// A step without an intent: a new workflow intent is handed out, and
	// nothing is sent.
	delete(write, "intent")
	wf, _ := call(t, cs, "submit_write", write)
	if wf.Kind != "intent_created" || !strings.HasPrefix(wf.Intent, "workflow-") || wf.Step != "make-pdf" ||
		!strings.Contains(wf.NextStep, wf.Intent) || sends.Load() != 1 {
		t.Fatalf("a step without an intent: %+v", wf)
	}
	write["intent"] = wf.Intent
	if r, _ := call(t, cs, "submit_write", write); r.Kind != "created" || r.Intent != wf.Intent || sends.Load() != 2 {
		t.Fatalf("the handed-out workflow's step: %+v", r)
	}
}
