package mcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/contract"
)

// envelope is what the keyed write path records of a call: the server's
// result, or its JSON-RPC error. A replay answers it again.
type envelope struct {
	Result *mcp.CallToolResult `json:"result,omitempty"`
	Error  *jsonrpc.Error      `json:"error,omitempty"`
}

func writeEnvelope(w http.ResponseWriter, e envelope) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(e)
}

// answer is the keyed write path's answer to a call, held to be read
// back as an MCP result.
type answer struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func newAnswer() *answer { return &answer{header: http.Header{}} }

// Header implements http.ResponseWriter.
func (a *answer) Header() http.Header { return a.header }

// WriteHeader implements http.ResponseWriter.
func (a *answer) WriteHeader(status int) {
	if a.status == 0 {
		a.status = status
	}
}

// Write implements http.ResponseWriter.
func (a *answer) Write(b []byte) (int, error) {
	a.WriteHeader(http.StatusOK)
	return a.body.Write(b)
}

// answer reads the keyed write path's answer as the model will: the
// server's result (marked as a replay when it is one), its JSON-RPC
// error, or a refusal with its code and next step.
func (ps *proxied) answer(ctx context.Context, req *mcp.CallToolRequest, a *answer) (*mcp.CallToolResult, error) {
	op := a.header.Get(contract.HeaderOperation)
	switch ct := a.header.Get("Content-Type"); {
	case a.status == http.StatusAccepted:
		var acc contract.Accepted
		if err := json.Unmarshal(a.body.Bytes(), &acc); err != nil {
			return nil, fmt.Errorf("an unreadable answer: %w", err)
		}
		return ps.pending(ctx, req, acc), nil
	case strings.HasPrefix(ct, "application/problem+json"):
		var p contract.Problem
		if err := json.Unmarshal(a.body.Bytes(), &p); err != nil {
			return nil, fmt.Errorf("an unreadable answer: %w", err)
		}
		return refusal(p.Code, nextStep(p.Code, p.Detail), mcp.Meta{contract.MetaOperation: op}), nil
	}
	var e envelope
	if err := json.Unmarshal(a.body.Bytes(), &e); err != nil || (e.Result == nil && e.Error == nil) {
		return nil, fmt.Errorf("an unreadable answer (%d)", a.status)
	}
	if e.Error != nil {
		return nil, e.Error
	}
	res := e.Result
	if res.Meta == nil {
		res.Meta = mcp.Meta{}
	}
	res.Meta[contract.MetaOperation] = op
	if a.header.Get(contract.HeaderReplayed) == "true" {
		res.Meta[contract.MetaReplayed] = true
	}
	return res, nil
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
		return "Unknown: the call reached the MCP server and nobody knows whether it took effect (" + detail + "). Do " +
			"not retry; call operation_status later, or ask a human to reconcile it." + keep
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
