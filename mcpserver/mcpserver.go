// Package mcpserver offers the agent client to a model as MCP tools. The
// model names intents, the server keeps their keys in the journal, and the
// gateway token stays in the server's environment: the model never sees it.
package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/agent"
)

// MaxBody bounds a body returned to the model.
const MaxBody = 8 << 10

// New returns the MCP server for a client. It sets c.RefuseDuplicates,
// and names intents with c.Keys' seals (see intents.go); without Keys, it
// takes only names its journal holds.
func New(c *agent.Client, version string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "idemgate", Version: version}, nil)
	c.RefuseDuplicates = true // see intents.go
	h := &handlers{c: c}
	mcp.AddTool(s, &mcp.Tool{Name: "submit_write", Description: submitDescription, Annotations: writes,
		InputSchema: schemaFor[SubmitInput](), OutputSchema: schemaFor[Result]()}, h.submit)
	mcp.AddTool(s, &mcp.Tool{Name: "operation_status", Description: statusDescription, Annotations: reads,
		InputSchema: schemaFor[StatusInput](), OutputSchema: schemaFor[Result]()}, h.status)
	mcp.AddTool(s, &mcp.Tool{Name: "list_operations", Description: listDescription, Annotations: reads,
		InputSchema: schemaFor[ListInput](), OutputSchema: schemaFor[ListOutput]()}, h.list)
	return s
}

// The tools' annotations, which clients use to decide what needs the
// user's consent: the lookups change nothing; submit_write changes the
// world, and calling it again with the same arguments (the same intent)
// does nothing more.
var (
	reads  = &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)}
	writes = &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(true)}
)

func ptr[T any](v T) *T { return &v }

const submitDescription = `Perform one write (POST, PUT, PATCH, DELETE) on the API behind the idemgate gateway, safely. Every write belongs to an intent: your name for one logical action. Call without an intent first: nothing is sent, and you get a new intent back; then call again with that intent to perform the write. Use intents exactly as this tool gives them (they end with a seal after "~"): a name it did not give is refused, and nothing is sent. On a timeout, an error or a restart, call again with the SAME intent and the same method, path and body (mode "resume", the default): the action is never performed twice. Use mode "repeat" only to do an identical action once more on purpose, and "revise" to change the parameters of an intent. If the kind is "unknown", do not retry and do not make a new intent: call operation_status later. If it is "needs_approval", a human must approve the write first (see approval: what, and by when): do not make a new intent or change the parameters; call operation_status later, or this tool again with the same intent. Every result says what happened (reason), whether anything reached the gateway (sent: no, maybe or yes) and what to do now (next_step): always follow next_step. A task made of several writes that must each happen once (make a file, store it, send its link) is a workflow: call with the first step's name and no intent to get the workflow's intent, then give every write that intent and a step name (letters, digits, '.', '_', ':', '-'); each step is its own action with its own key, the intent "<intent>/<step>". Do the steps in order, and stop at the first whose kind is not "created" or "replayed": following its next_step, then resuming each step with the same intent, step, method, path and body, never performs a step twice, and a step that already succeeded only replays its answer.`

const statusDescription = `Show what is known of an intent (or of an operation id, or of one step of a workflow: intent and step): the last outcome this server saw and the gateway's current view of the operation, with the next step. Use it after an "unknown", "in_progress" or "needs_approval" result, instead of sending the write again; for a write waiting for a human, it shows the approval (id, status, summary, expires_at).`

const listDescription = `List this server's open intents, oldest first: never sent, in progress, unknown, waiting for approval, or failed before the gateway could take them (nothing applied; resuming may still perform them). Each comes with the journal's last record and a next_step. Use it after losing track of your work, before starting anything new.`

// SubmitInput is submit_write's input.
type SubmitInput struct {
	Intent string         `json:"intent,omitempty" jsonschema:"the intent returned by a first call, exactly as given; omit it to create one"`
	Method string         `json:"method" jsonschema:"the HTTP method of the write"`
	Path   string         `json:"path" jsonschema:"the API path with its query, starting with /, e.g. /v1/tickets"`
	Body   map[string]any `json:"body,omitempty" jsonschema:"the request's JSON body, as an object; omit it for none"` // for the schema: see rawBody
	Mode   string         `json:"mode,omitempty" jsonschema:"resume: the same action again (the default, also after a timeout or an error); repeat: a new, identical action on purpose; revise: changed parameters for this intent"`
	Step   string         `json:"step,omitempty" jsonschema:"the name of this write as one step of the workflow the intent names (then intent is required): the step runs as its own action, intent <intent>/<step>; omit it for a single write"`
}

// Result is what submit_write and operation_status return. Every field
// but approval and state is always there, so that an empty one reads as
// "none", never as "missing"; those two are there only when they say
// something, since an empty approval reads as one that is involved.
type Result struct {
	Intent      string          `json:"intent" jsonschema:"the intent this result is about: reuse it on every retry of this action"`
	Step        string          `json:"step" jsonschema:"the workflow step this result is about, as given: reuse it with the intent on every retry; empty for a single write"`
	Kind        string          `json:"kind" jsonschema:"what became of the write (operation_status: succeeded once it was performed)"`
	Sent        string          `json:"sent" jsonschema:"whether a request of this intent reached the gateway: no (nothing can have happened), maybe (one left with no answer), yes"`
	Reason      string          `json:"reason" jsonschema:"what happened, in words"`
	OperationID string          `json:"operation_id" jsonschema:"the gateway's operation id, or empty if it has named none"`
	Status      int             `json:"status" jsonschema:"the HTTP status of the last answer that told something of the operation, or 0 if none did"`
	Body        string          `json:"body" jsonschema:"that answer's body (for operation_status, the gateway's view of the operation), cut to 8 KiB; empty if none"`
	Attempts    int             `json:"attempts" jsonschema:"requests sent for this intent so far"`
	Approval    *ApprovalResult `json:"approval,omitempty" jsonschema:"the human decision the write waits for (kind needs_approval) or that the gateway named with it; absent when none is involved"`
	State       string          `json:"state,omitempty" jsonschema:"operation_status only: the operation's state at the gateway (prepared, executing, succeeded, failed or unknown); absent when the gateway holds none or could not be asked"`
	NextStep    string          `json:"next_step" jsonschema:"what to do now: follow it"`
}

// ApprovalResult is the approval in a Result; empty fields read as
// "none".
type ApprovalResult struct {
	ID        string `json:"id" jsonschema:"the approval's id at the gateway, or empty if none is involved"`
	Status    string `json:"status" jsonschema:"pending (no human has decided yet), approved, denied, expired or used; empty if none"`
	Summary   string `json:"summary" jsonschema:"what a human is asked to approve, in words; empty if the gateway did not say"`
	ExpiresAt string `json:"expires_at" jsonschema:"when a pending approval expires undecided (RFC 3339); empty if none"`
}

func approvalResult(a *agent.ApprovalInfo) *ApprovalResult {
	if a == nil {
		return nil
	}
	r := &ApprovalResult{ID: a.ID, Status: string(a.Status), Summary: a.Summary}
	if !a.ExpiresAt.IsZero() {
		r.ExpiresAt = a.ExpiresAt.UTC().Format(time.RFC3339)
	}
	return r
}

// resultOf is an outcome as the model reads it.
func resultOf(o agent.Outcome) Result {
	kind := string(o.Kind)
	if kind == "" {
		kind = "intent_created"
	}
	return Result{Intent: o.Intent, Kind: kind, Sent: string(o.Sent), Reason: o.Reason, OperationID: o.OperationID,
		Status: o.Status, Body: bounded(o.Body), Attempts: o.Attempts, Approval: approvalResult(o.Approval),
		NextStep: NextStep(o)}
}

type handlers struct{ c *agent.Client }

// result is resultOf, naming the intent as the model is given it.
func (h *handlers) result(o agent.Outcome) Result {
	r := resultOf(o)
	r.Intent = h.seal(o.Intent)
	return r
}

func (h *handlers) submit(ctx context.Context, req *mcp.CallToolRequest, in SubmitInput) (*mcp.CallToolResult, Result, error) {
	body, err := rawBody(req)
	if err != nil {
		return nil, Result{}, err
	}
	a := agent.Action{Method: in.Method, Path: in.Path, Body: body, Mode: agent.Mode(in.Mode)}
	switch {
	case in.Step != "" && a.Mode == agent.Repeat:
		return nil, Result{}, errors.New(`mode "repeat" cannot take a step (it would make an action outside the workflow): name a new workflow intent`)
	case in.Intent == "" && in.Step != "":
		r, err := h.newWorkflow(in.Step)
		return nil, r, err
	case in.Intent == "":
		return h.prepare(ctx, a)
	}
	name, err := h.named(ctx, in.Intent, in.Step)
	if err == nil {
		a.Intent, err = target(name, in.Step)
	}
	if err != nil {
		return nil, Result{}, err
	}
	return h.perform(ctx, a, name, in.Step)
}

// perform does the write under the journal's intent name (of the workflow,
// with a step), and says what became of it.
func (h *handlers) perform(ctx context.Context, a agent.Action, name, step string) (*mcp.CallToolResult, Result, error) {
	out, err := h.c.Do(ctx, a)
	if errors.Is(err, agent.ErrPayloadChanged) && out.Key == "" {
		r := stepped(h.changed(name, a.Mode), h.seal(name), step)
		return errorUnlessDone(r), r, nil
	}
	if err != nil && out.Key == "" {
		return nil, Result{}, h.refusal(err)
	}
	out.Unfinished = out.Unfinished || err != nil // stopped before the policy was done
	r := stepped(h.result(out), h.seal(name), step)
	switch { // after sending: the outcome so far stands
	case err != nil && ctx.Err() != nil:
		r.Reason += "; the call was cancelled before the policy was done"
	case err != nil:
		r.Reason += "; the journal could not record this outcome (" + err.Error() + "): resuming asks the gateway first"
	}
	return errorUnlessDone(r), r, nil
}

// changed is the refusal of a write whose method, path or body differs
// from the one its intent was made for: nothing was sent, and the model
// is told the two ways on, the mode spelt as it passes it.
func (h *handlers) changed(name string, mode agent.Mode) Result {
	intent := h.seal(name)
	why := "resume"
	if mode == agent.Repeat {
		why = "repeat (an identical action once more)"
	}
	return Result{Intent: intent, Kind: string(agent.Conflict), Sent: string(agent.SentNo),
		Reason: fmt.Sprintf("nothing was sent: the method, path or body differs from the request intent %q was made "+
			"for, and mode %s needs the same request", intent, why),
		NextStep: fmt.Sprintf(`Nothing was sent. If you meant this intent's own action, call submit_write again with `+
			`intent %q and its original method, path and body. If its parameters changed on purpose, call submit_write `+
			`with intent %q, the new method, path and body, and mode: "revise".`, intent, intent)}
}

// errorUnlessDone marks a result whose write was not performed (now or
// before) as an error result, its kind, reason and next step kept: a
// client that reads only isError must not take a refusal, a wait or an
// unknown outcome for the action the model asked for.
func errorUnlessDone(r Result) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: r.Kind != string(agent.Created) && r.Kind != string(agent.Replayed)}
}

// target is the intent a tool's input names: intent, or with a step that
// workflow step's own intent, as agent.Client.RunWorkflow runs it.
func target(intent, step string) (string, error) {
	if step == "" {
		return intent, nil
	}
	return agent.StepIntent(intent, step)
}

// stepped makes a step's result name the workflow's intent and the step,
// as the model gave them: reusing the journal's "<intent>/<step>" with the
// step again would name another step, and another key.
func stepped(r Result, intent, step string) Result {
	if step == "" {
		return r
	}
	r.Intent, r.Step = intent, step
	r.NextStep += fmt.Sprintf(" This is step %q of the workflow intent %q: on every call about it, pass intent %q "+
		"and step %q (not the intent %q).", step, intent, intent, step, intent+"/"+step)
	return r
}

// prepare answers an unnamed write: a new intent, or the one already made
// for this very request, and never a send.
func (h *handlers) prepare(ctx context.Context, a agent.Action) (*mcp.CallToolResult, Result, error) {
	e, existing, err := h.c.Prepare(ctx, a)
	if err != nil {
		return nil, Result{}, h.refusal(err)
	}
	o := agent.Outcome{Intent: e.Intent, Kind: e.LastKind, OperationID: e.OperationID, Status: e.LastStatus,
		Attempts: e.Attempts, Sent: e.Sent}
	r := h.result(o)
	if !existing {
		r.Reason = "nothing was sent: a new intent was made for this request"
		r.NextStep = fmt.Sprintf("Nothing was sent yet. Call submit_write again with intent %q and the same "+
			"method, path and body to perform it; reuse this intent on every retry of this action.", r.Intent)
		return nil, r, nil
	}
	r.Reason = fmt.Sprintf("nothing was sent: intent %q (made %s) is this exact request", r.Intent,
		e.CreatedAt.Format(time.RFC3339))
	r.NextStep = fmt.Sprintf("Nothing was sent now: intent %q is this exact request. Resume it with that intent "+
		"(mode resume) to get its outcome; only if you mean to do the same action once more, use mode \"repeat\" "+
		"with it.", r.Intent)
	return nil, r, nil
}

// rawBody is the body exactly as the client sent it. The SDK checks the
// arguments against the schema by decoding them into Go values and
// encoding them again, which turns every number into a float64: an amount
// of 9007199254740993 reached the API as 9007199254740992. The agent gets
// these bytes instead, and refuses what JSON numbers cannot carry exactly.
func rawBody(req *mcp.CallToolRequest) ([]byte, error) {
	var args struct {
		Body json.RawMessage `json:"body"`
	}
	if err := json.Unmarshal(req.Params.Arguments, &args); err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	if len(args.Body) == 0 || string(args.Body) == "null" {
		return nil, nil
	}
	return args.Body, nil
}

// StatusInput is operation_status's input: one of the two.
type StatusInput struct {
	Intent      string `json:"intent,omitempty" jsonschema:"the intent to look up; give this or operation_id"`
	Step        string `json:"step,omitempty" jsonschema:"with intent: the workflow step to look up (the intent <intent>/<step>)"`
	OperationID string `json:"operation_id,omitempty" jsonschema:"the gateway's operation id to look up; give this or intent"`
}

func (h *handlers) status(ctx context.Context, _ *mcp.CallToolRequest, in StatusInput) (*mcp.CallToolResult, Result, error) {
	st, name, err := h.lookup(ctx, in)
	if err != nil {
		return nil, Result{}, err
	}
	r := statusResult(st)
	r.Intent = h.seal(st.Entry.Intent)
	return nil, stepped(r, h.seal(name), in.Step), nil
}

// lookup finds the intent the input names (name: the journal's name of
// the intent given, "" for an operation id) and asks the gateway.
func (h *handlers) lookup(ctx context.Context, in StatusInput) (st agent.Status, name string, err error) {
	switch {
	case in.Step != "" && in.Intent == "":
		return st, "", errors.New("a step needs its workflow's intent")
	case in.Intent != "":
		if name, err = h.named(ctx, in.Intent, in.Step); err != nil {
			return st, "", err
		}
		intent, err := target(name, in.Step)
		if err != nil {
			return st, "", err
		}
		st, err = h.c.Status(ctx, intent)
		if errors.Is(err, agent.ErrNoIntent) {
			err = fmt.Errorf("%w: this server's journal holds no record of it (it may have been lost). Its key is "+
				"derived from the intent, so submit_write with the same intent, method, path and body (mode resume) "+
				"is replayed if it was done, and never done twice", err)
		}
		return st, name, err
	case in.OperationID != "":
		st, err = h.c.StatusByOperation(ctx, in.OperationID)
		return st, "", err
	}
	return st, "", errors.New("give an intent or an operation_id")
}

// statusResult is what a lookup found: the operation's state, and a write
// done (now or before) is "succeeded", since a lookup neither created nor
// replayed anything.
func statusResult(st agent.Status) Result {
	r := resultOf(st.Outcome())
	r.State = st.State()
	if r.Kind == string(agent.Created) || r.Kind == string(agent.Replayed) {
		r.Kind = Succeeded
	}
	return r
}

// Succeeded is operation_status's kind for a write that was performed.
const Succeeded = "succeeded"

// ListInput is list_operations' input (none).
type ListInput struct{}

// ListOutput is list_operations' output.
type ListOutput struct {
	Intents []Pending `json:"intents" jsonschema:"the open intents, oldest first; empty when there are none"`
}

// Pending is one open intent as the journal knows it, with what to do
// about it: the model resumes its work from this after losing its context.
type Pending struct {
	Intent      string `json:"intent" jsonschema:"the intent: resume it with submit_write, or look it up with operation_status"`
	Version     int    `json:"version" jsonschema:"the intent's version (a revise makes a new one)"`
	Method      string `json:"method" jsonschema:"the write's HTTP method"`
	Path        string `json:"path" jsonschema:"the write's API path"`
	Kind        string `json:"kind" jsonschema:"what the journal last recorded of it"`
	Sent        string `json:"sent" jsonschema:"whether a request of this intent reached the gateway: no, maybe or yes"`
	Reason      string `json:"reason" jsonschema:"what the journal last recorded, in words"`
	Status      int    `json:"status" jsonschema:"the HTTP status of the last answer that told something of the operation, or 0 if none did"`
	OperationID string `json:"operation_id" jsonschema:"the gateway's operation id, or empty if it has named none"`
	Attempts    int    `json:"attempts" jsonschema:"requests sent for this intent so far"`
	CreatedAt   string `json:"created_at" jsonschema:"when the intent was made (RFC 3339)"`
	UpdatedAt   string `json:"updated_at" jsonschema:"when the journal last changed it (RFC 3339)"`
	NextStep    string `json:"next_step" jsonschema:"what to do about it now: follow it"`
}

func (h *handlers) list(ctx context.Context, _ *mcp.CallToolRequest, _ ListInput) (*mcp.CallToolResult, ListOutput, error) {
	entries, err := h.c.Journal.Pending(ctx)
	if err != nil {
		return nil, ListOutput{}, err
	}
	out := ListOutput{Intents: []Pending{}}
	for _, e := range entries {
		// Only failures the gateway never answered are listed: resuming
		// them may still perform them.
		o := agent.Outcome{Intent: e.Intent, Kind: e.LastKind, Sent: e.Sent, Reason: journalReason(e),
			OperationID: e.OperationID, Status: e.LastStatus, Attempts: e.Attempts, Unfinished: e.LastKind == agent.Failed}
		r := h.result(o)
		out.Intents = append(out.Intents, Pending{Intent: r.Intent, Version: e.Version, Method: e.Method, Path: e.Path,
			Kind: r.Kind, Sent: r.Sent, Reason: r.Reason, Status: r.Status, OperationID: r.OperationID,
			Attempts: r.Attempts, CreatedAt: e.CreatedAt.Format(time.RFC3339), UpdatedAt: e.UpdatedAt.Format(time.RFC3339),
			NextStep: r.NextStep})
	}
	return nil, out, nil
}

// journalReason says what the journal last recorded of an intent.
func journalReason(e *agent.Entry) string {
	switch {
	case e.Attempts == 0:
		return "never sent"
	case e.LastKind == "":
		return "sent, and the process stopped before its answer was recorded"
	}
	s := fmt.Sprintf("the journal last recorded %s after %d attempt(s)", e.LastKind, e.Attempts)
	if e.LastStatus > 0 {
		s += fmt.Sprintf(", status %d", e.LastStatus)
	}
	return s
}

// bounded cuts a body to MaxBody bytes, on a character boundary.
func bounded(b []byte) string {
	if len(b) <= MaxBody {
		return string(b)
	}
	cut := MaxBody
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut]) + fmt.Sprintf("… [%d more bytes]", len(b)-cut)
}
