package mcpproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/jsonptr"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// MaxIntent bounds an intent, in characters.
const MaxIntent = 128

// intentDescription is what a model reads of the intent argument.
const intentDescription = "Your name for this intended action: the same name when you retry it, a new name for a " +
	"new action. 1 to 128 printable ASCII characters."

// tool is one of the upstream's tools as the proxy serves it.
type tool struct {
	name string
	// guarded is whether its calls are; configured says the configuration
	// decided it (else the server's annotations did).
	guarded, configured bool
	// intent is the argument that carries the intent: "intent", or
	// "_intent" when the tool has an argument "intent" of its own; "" when
	// its schema has no room for one.
	intent string
	// validate checks a call's arguments against the tool's own schema
	// (nil: it did not compile, and a guarded tool is left out).
	validate func(any) (any, error)
	// policy is its operations'; business and concurrent the pointers of
	// its business and concurrency keys.
	policy               keyed.Policy
	business, concurrent []string
	// listed is the tool as the proxy lists it, in its server's own
	// bytes (nil: as the SDK has it).
	listed json.RawMessage
}

// guarded decides whether a tool is guarded: by its setting if it has
// one, else unless the server says it only reads. An annotation is the
// server's hint, never enough on its own to relax a configured guard.
func guarded(setting *bool, t *mcp.Tool) bool {
	if setting != nil {
		return *setting
	}
	return t.Annotations == nil || !t.Annotations.ReadOnlyHint
}

// list reads the server's tools, and serves them: each guarded tool with
// its intent argument.
func (ps *proxied) list(ctx context.Context, s *mcp.ClientSession) error {
	var ups []*mcp.Tool
	for t, err := range s.Tools(ctx, nil) {
		if err != nil {
			return err
		}
		ups = append(ups, t)
	}
	slices.SortFunc(ups, func(a, b *mcp.Tool) int { return cmpString(a.Name, b.Name) })
	tools := map[string]*tool{}
	served := make([]*mcp.Tool, 0, len(ups))
	var names []string
	for _, up := range ups {
		if up.Name == statusToolName {
			ps.p.opts.Logger.Warn("mcp server: a tool named " + statusToolName + " is hidden by the proxy's own")
			continue
		}
		t, shown, err := ps.tool(up)
		if err != nil {
			ps.p.opts.Logger.Warn("mcp server: tool left out", "tool", up.Name, "error", err.Error())
			continue
		}
		tools[up.Name], served = t, append(served, shown)
		names = append(names, t.policy.Name)
	}
	ps.p.opts.Executor.Announce(names)
	ps.publish(tools, served)
	return nil
}

// tool is how the proxy serves up: its settings, its checks, and the tool
// as its clients see it (a guarded one with its intent argument,
// required). A guarded tool whose schema the proxy cannot check is left
// out rather than its calls unchecked.
func (ps *proxied) tool(up *mcp.Tool) (*tool, *mcp.Tool, error) {
	c := ps.cfg.Tools[up.Name]
	t := &tool{name: up.Name, guarded: guarded(c.Guard, up), configured: c.Guard != nil,
		policy: keyed.Policy{Name: contract.MCPRoute(ps.cfg.Name, up.Name), Kind: ledger.KindMCP, Lease: c.Lease,
			Retention: c.Retention, Approval: c.Approval, MaxAnswer: c.MaxResult}}
	if t.policy.MaxAnswer <= 0 {
		t.policy.MaxAnswer = contract.DefaultMaxResponse
	}
	var err error
	if t.business, err = jsonptr.Parse(c.BusinessKey); err != nil {
		return nil, nil, err
	}
	if t.concurrent, err = jsonptr.Parse(c.ConcurrencyKey); err != nil {
		return nil, nil, err
	}
	raw, err := json.Marshal(up.InputSchema)
	if err != nil {
		return nil, nil, err
	}
	schema, intent, serr := withIntent(raw)
	t.intent = intent
	validate, verr := validator(raw)
	t.validate = validate
	switch {
	case !t.guarded:
		t.listed = ps.written(up.Name, nil)
		return t, up, nil
	case verr != nil:
		return nil, nil, fmt.Errorf("its input schema: %w", verr)
	case serr != nil:
		return nil, nil, serr
	}
	shown := *up
	shown.InputSchema = schema
	t.listed = ps.written(up.Name, schema)
	return t, &shown, nil
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// publish swaps in a new list of tools, and tells the proxy's clients of
// what changed (the SDK sends tools/list_changed): a server started again
// with the same tools changes nothing they see. A call is taken by the
// guard middleware (call.go); the tools' own handlers forward what it
// lets by.
func (ps *proxied) publish(tools map[string]*tool, served []*mcp.Tool) {
	shown := make(map[string]string, len(served))
	for _, t := range served {
		b, _ := json.Marshal(t)
		shown[t.Name] = string(b)
	}
	ps.mu.Lock()
	old := ps.shown
	ps.tools, ps.shown = tools, shown
	ps.mu.Unlock()
	var gone []string
	for name := range old {
		if _, ok := shown[name]; !ok {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		ps.srv.RemoveTools(gone...)
	}
	changed := len(gone)
	for _, t := range served {
		if old[t.Name] != shown[t.Name] {
			ps.srv.AddTool(t, ps.forward)
			changed++
		}
	}
	if changed > 0 && old != nil {
		ps.p.opts.Logger.Info("mcp server: its tools changed; clients are told", "mcp_server", ps.cfg.Name,
			"changed", changed)
	}
}

// withIntent adds the intent argument to an object schema, required: it
// is "intent", or "_intent" when the tool has an argument "intent".
func withIntent(raw []byte) (map[string]any, string, error) {
	var s map[string]any
	if err := json.Unmarshal(raw, &s); err != nil || s == nil {
		return nil, "", errors.New("its input schema is not a JSON object")
	}
	props, _ := s["properties"].(map[string]any)
	props = maps.Clone(props)
	if props == nil {
		props = map[string]any{}
	}
	name := "intent"
	if _, taken := props[name]; taken {
		name = "_intent"
	}
	if _, taken := props[name]; taken {
		return nil, "", errors.New("it has arguments intent and _intent: the proxy has no name left for the intent")
	}
	props[name] = map[string]any{"type": "string", "minLength": 1, "maxLength": MaxIntent,
		"pattern": "^[\\x20-\\x7e]+$", "description": intentDescription}
	required, _ := s["required"].([]any)
	s["properties"], s["required"] = props, append(slices.Clone(required), name)
	s["type"] = "object"
	return s, name, nil
}

// validator checks a call's arguments (the intent removed) against the
// tool's own input schema; a schema the validator cannot compile leaves
// the tool out rather than its calls unchecked. Remote references are
// never fetched.
func validator(raw []byte) (func(any) (any, error), error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, err
	}
	sch, err := c.Compile(schemaURL)
	if err != nil {
		return nil, err
	}
	return func(args any) (any, error) {
		if args == nil {
			args = map[string]any{}
		}
		if err := sch.Validate(args); err != nil {
			return nil, fmt.Errorf("the arguments do not match the tool's input schema: %s", schemaErrors(err))
		}
		return args, nil
	}, nil
}

// schemaURL names a tool's input schema to the validator: absolute, so
// that it is never made a file of the gateway's working directory, which
// a refusal would show.
const schemaURL = "urn:idemgate:mcp-tool-input"

// schemaErrors is what a validation error says is wrong (each cause's
// JSON pointer and complaint), without its first line, which names the
// schema.
func schemaErrors(err error) string {
	_, causes, ok := strings.Cut(err.Error(), "\n")
	if !ok {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(causes, "\n") {
		if line = strings.TrimPrefix(strings.TrimSpace(line), "- "); line != "" {
			out = append(out, line)
		}
	}
	return strings.Join(out, "; ")
}

// noLoader refuses every remote reference of a server's schema.
type noLoader struct{}

// Load implements jsonschema.URLLoader.
func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("%s: the proxy loads no schema from elsewhere", url)
}

// lookup is the tool named name, as now served.
func (ps *proxied) lookup(name string) *tool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.tools[name]
}
