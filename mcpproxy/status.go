package mcpproxy

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// statusToolName is the proxy's own tool.
const statusToolName = "operation_status"

func statusTool() *mcp.Tool {
	return &mcp.Tool{Name: statusToolName,
		Description: "Where an action you started through this server stands (done, failed, running, unknown, " +
			"waiting for a human's approval, or never received), by the tool and the intent you named it with.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
		InputSchema: map[string]any{"type": "object", "additionalProperties": false, "required": []any{"tool", "intent"},
			"properties": map[string]any{
				"tool":   map[string]any{"type": "string", "minLength": 1},
				"intent": map[string]any{"type": "string", "minLength": 1, "maxLength": MaxIntent},
			}}}
}

// statusView is operation_status's structured answer.
type statusView struct {
	Operation string       `json:"operation,omitempty"`
	State     ledger.State `json:"state,omitempty"`
	Error     string       `json:"error,omitempty"`
	Approval  string       `json:"approval,omitempty"`
	NextStep  string       `json:"next_step"`
}

// status answers operation_status: the operation the caller's intent
// names, read from the ledger; nothing is sent anywhere.
func (ps *proxied) status(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var in struct{ Tool, Intent string }
	raw := req.Params.Arguments
	if err := json.Unmarshal(raw, &in); err != nil {
		return refusal(contract.CodeInvalidCommand, "want {tool, intent}: "+err.Error(), nil), nil
	}
	pr, ok := principalOf(req.Extra)
	if !ok {
		return nil, errors.New("no principal")
	}
	t := ps.lookup(in.Tool)
	if t == nil || t.intent == "" {
		return refusal(contract.CodeNotFound, "no guarded tool "+in.Tool+" on this server", nil), nil
	}
	ns, key, msg := ps.keyOf(t, pr, in.Intent, true, nil)
	if msg != "" {
		return refusal(contract.CodeInvalidKey, msg, nil), nil
	}
	op, err := ps.p.opts.Executor.Store().GetByKey(ctx, ledger.OpKey{Tenant: pr.Tenant, Namespace: ns, Key: key})
	v := statusView{}
	switch {
	case errors.Is(err, ledger.ErrNotFound):
		v.NextStep = "No action under this intent: the proxy never received it, so nothing was done. Call " +
			in.Tool + " with this intent to do it."
	case err != nil:
		return refusal(contract.ProblemFor(err).Code, err.Error(), nil), nil
	default:
		v = statusOf(op)
	}
	b, _ := json.Marshal(v)
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(b)}}, StructuredContent: v}, nil
}

// statusOf says where an operation stands, and what to do next.
func statusOf(op *ledger.Operation) statusView {
	v := statusView{Operation: op.ID, State: op.State, Error: op.LastError}
	if op.Approval != nil {
		v.Approval = op.Approval.ID
	}
	switch {
	case op.State.Final():
		v.NextStep = "Finished (" + string(op.State) + "). Call the tool again with the same intent and arguments " +
			"to read its result: it is replayed, never run again."
	case op.State == ledger.Unknown:
		v.NextStep = nextStep(contract.CodeOutcomeUnknown, "no answer was recorded")
	case op.State == ledger.Prepared && op.Approval != nil:
		v.NextStep = "Waiting for a human's approval; nothing was sent. Call the tool again with the same intent " +
			"and arguments later: it runs once approved, and never twice." + keep
	default:
		v.NextStep = nextStep(contract.CodeInProgress, "")
	}
	return v
}
