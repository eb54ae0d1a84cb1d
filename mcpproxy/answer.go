package mcpproxy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// envelope is what an operation of a call keeps: the server's result,
// or its JSON-RPC error. A replay answers it again.
type envelope struct {
	Result *mcp.CallToolResult `json:"result,omitempty"`
	Error  *jsonrpc.Error      `json:"error,omitempty"`
}

// envelopeOutcome is a call's answer as the executor records it.
func envelopeOutcome(fate contract.Fate, code string, e envelope) keyed.Outcome {
	body, _ := json.Marshal(e)
	return keyed.Outcome{Fate: fate, Code: code, Answer: &ledger.Response{Status: http.StatusOK,
		Header: map[string][]string{"Content-Type": {"application/json"}}, Body: body}}
}

// answer is the executor's result as the model reads it: the server's
// result (marked as a replay when it is one), its JSON-RPC error, or a
// refusal with its code and next step.
func (ps *proxied) answer(ctx context.Context, req *mcp.CallToolRequest, res keyed.Result) (*mcp.CallToolResult, error) {
	meta := mcp.Meta{}
	if res.Op != nil {
		meta[contract.MetaOperation] = res.Op.ID
	}
	switch {
	case res.Problem != nil:
		return refusal(res.Problem.Code, nextStep(res.Problem.Code, res.Problem.Detail), meta), nil
	case res.Accepted != nil:
		return ps.pending(ctx, req, *res.Accepted), nil
	case res.Answer == nil:
		return resolvedWithout(res.Op, meta), nil
	case keyed.NotKept(res.Answer):
		return notKept(res, meta), nil
	}
	var e envelope
	if err := json.Unmarshal(res.Answer.Body, &e); err != nil || (e.Result == nil && e.Error == nil) {
		return nil, fmt.Errorf("an unreadable answer of operation %s", res.Op.ID)
	}
	if e.Error != nil {
		return nil, e.Error
	}
	out := e.Result
	out.Meta = unmarked(out.Meta)
	if out.Meta == nil {
		out.Meta = mcp.Meta{}
	}
	for k, v := range meta {
		out.Meta[k] = v
	}
	if res.Replayed {
		out.Meta[contract.MetaReplayed] = true
	}
	if res.Unrecorded {
		out.Meta[contract.MetaUnrecorded] = true
	}
	return out, nil
}

// resolvedWithout answers for an operation an operator resolved without
// the server's result: said so, never taken for the server's.
func resolvedWithout(op *ledger.Operation, meta mcp.Meta) *mcp.CallToolResult {
	meta[contract.MetaReplayed] = true
	return &mcp.CallToolResult{IsError: op.State == ledger.Failed, Meta: meta, Content: []mcp.Content{&mcp.TextContent{
		Text: "This action was resolved as " + string(op.State) + " by an operator, without the MCP server's " +
			"result: this text is idemgate's, not the server's. It will not run again." + keep}}}
}

// notKept answers a replay of a result too large to keep: what it was,
// and that the call that ran it was given it whole.
func notKept(res keyed.Result, meta mcp.Meta) *mcp.CallToolResult {
	var nk contract.NotKept
	_ = json.Unmarshal(res.Answer.Body, &nk)
	meta[contract.MetaReplayed], meta[contract.MetaNotKept] = true, true
	return &mcp.CallToolResult{IsError: res.State == ledger.Failed, Meta: meta, Content: []mcp.Content{&mcp.TextContent{
		Text: fmt.Sprintf("This action already ran (%s). Its result was %d bytes, over the %d this server's results "+
			"are kept within, so it is not kept: only the call that ran it was given it. It will not run again.%s",
			res.State, nk.Size, nk.Limit, keep)}}}
}

// refusal is an isError result: the problem's code in _meta, and text
// that tells the model what to do next.
func refusal(code, text string, meta mcp.Meta) *mcp.CallToolResult {
	if meta == nil {
		meta = mcp.Meta{}
	}
	if meta[contract.MetaOperation] == "" {
		delete(meta, contract.MetaOperation)
	}
	meta[contract.MetaCode] = code
	return &mcp.CallToolResult{IsError: true, Meta: meta,
		Content: []mcp.Content{&mcp.TextContent{Text: code + ": " + text}}}
}

// keep is said with every answer that must not lead to a second effect.
const keep = " Do not create a new intent for this action and do not change its arguments: the action could then " +
	"happen twice."

// nextStep says what a model does after a refusal, as `idemgate mcp`'s
// next_step does for a keyed HTTP write.
func nextStep(code, detail string) string {
	switch code {
	case contract.CodeFingerprintMismatch:
		return "This intent was first used with other arguments; nothing was sent. To retry that action, send its " +
			"original arguments. If the arguments changed on purpose, it is a new action: call the tool with a new intent."
	case contract.CodeInProgress:
		return "Still running under this intent; nothing was sent again. Call operation_status with this tool and " +
			"intent later, or call the tool again with the same intent and arguments: it never runs twice." + keep
	case contract.CodeOutcomeUnknown:
		return "Unknown: nobody knows whether the call took effect (" + detail + "). Do not retry; call " +
			"operation_status later, or ask a human to reconcile it." + keep
	case contract.CodeConcurrencyLocked:
		return "Another action of the same group is running; nothing was sent. Call again later with the same " +
			"intent and arguments."
	case contract.CodeApprovalDenied:
		return "A human denied this action; it was not performed. Do not retry it; tell the user."
	case contract.CodeRateLimited, contract.CodeUpstreamUnavailable, contract.CodeStoreUnavailable:
		return detail + ". Nothing happened: call again later with the same intent and arguments."
	case contract.CodeInvalidCommand, contract.CodeMissingKey, contract.CodeInvalidKey, contract.CodePayloadTooLarge:
		return "Refused, and nothing was sent: " + detail + ". Fix the call and send it again."
	}
	return detail
}

// pending answers a call that waits for a human: the approval, where it is
// decided, and what to do meanwhile. A client that declares URL-mode
// elicitation is also sent the approval's page.
func (ps *proxied) pending(ctx context.Context, req *mcp.CallToolRequest, acc contract.Accepted) *mcp.CallToolResult {
	url := ps.p.opts.ApprovalURL(acc.Approval.ID)
	if base, ok := req.Extra.TokenInfo.Extra[baseKey].(string); ok && strings.HasPrefix(url, "/") {
		url = base + url
	}
	what := "this action"
	if acc.Approval.Summary != "" {
		what = fmt.Sprintf("%q", acc.Approval.Summary)
	}
	text := "A human must decide whether to approve " + what + " before " +
		acc.Approval.ExpiresAt.UTC().Format(time.RFC3339) + ", at " + url + "; nothing is sent to the MCP server " +
		"until then. Tell the user it waits for a human's approval. Call operation_status with this tool and intent " +
		"later, or call the tool again with the same intent and arguments: it runs once approved, and never twice." + keep
	if acc.Code == contract.CodeApprovalExpired {
		text = "The earlier approval lapsed; a new one was opened. " + text
	}
	ps.elicit(ctx, req, acc, url)
	return refusal(acc.Code, text, mcp.Meta{contract.MetaOperation: acc.OperationID,
		contract.MetaApproval: acc.Approval.ID, contract.MetaApprovalURL: url})
}

// elicit sends the approval's page to a client that declares URL-mode
// elicitation, and waits (at most the server's timeout) for its user to
// take or refuse it; either way the call's answer is the same.
func (ps *proxied) elicit(ctx context.Context, req *mcp.CallToolRequest, acc contract.Accepted, url string) {
	caps := req.Session.InitializeParams().Capabilities
	if caps == nil || caps.Elicitation == nil || caps.Elicitation.URL == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, ps.cfg.Timeout)
	defer cancel()
	_, err := req.Session.Elicit(ctx, &mcp.ElicitParams{Mode: "url", URL: url, ElicitationID: acc.Approval.ID,
		Message: "Approve or deny: " + acc.Approval.Summary})
	if err != nil {
		ps.p.opts.Logger.Info("mcp proxy: elicitation", "approval", acc.Approval.ID, "error", err.Error())
	}
}
