// Package approval compiles a route's `approval:` block into a Policy that
// decides, per request, whether a human must approve the effect first and
// what that human is shown.
//
// Everything that can be checked is checked by Compile, at start-up, so a bad
// config fails the boot rather than a request. Evaluation is bounded: CEL runs
// under a cost limit and the summary template under an output limit and a
// restricted grammar, so a hostile config cannot hang a request.
package approval

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"text/template"
	"text/template/parse"
	"time"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/types"
)

// DefaultTTL is how long a pending request waits for a decision when the
// route does not say: long enough for a human to react, short enough that a
// stale request does not get approved by surprise.
const DefaultTTL = 15 * time.Minute

// DefaultApprovers are the roles that may decide when the route names none.
// Compile copies it, so changing it later affects only later compiles.
var DefaultApprovers = []string{"approver"}

// maxSummary bounds a rendered summary in bytes, so a body cannot make the
// approval record or the approver's screen arbitrarily large.
const maxSummary = 1000

// costLimit bounds one `when` evaluation. A plain comparison costs a handful
// of units; a million leaves room for comprehensions over real bodies while
// stopping a hostile expression within milliseconds.
const costLimit = 1_000_000

// Principal is a caller as a policy sees it.
type Principal struct {
	// Name identifies the caller within its tenant.
	Name string
	// Tenant is the caller's tenant; approvers come from the same one.
	Tenant string
	// Roles are the caller's roles, e.g. "approver".
	Roles []string
}

// Input is what `when` and `summary` see about one request.
type Input struct {
	// Method is the HTTP method, "POST".
	Method string
	// Path is the concrete escaped path, "/v1/services/api/deployments".
	Path string
	// Params are the path parameters by name (nil = none).
	Params map[string]string
	// Query is the query string (nil = none).
	Query map[string][]string
	// Body is the validated command: map[string]any, []any, string, bool,
	// nil, and json.Number for every number (never float64). `when` and
	// `summary` read it as body, or as args (a tool call's arguments).
	Body any
	// Headers are the route's fingerprinted headers (nil = none).
	Headers map[string]string
	// Principal is the caller.
	Principal Principal
}

// Config is the route's `approval:` block as written.
type Config struct {
	// When is a CEL condition; empty means approval is always required.
	When string `yaml:"when"`
	// TTL is how long a pending request waits before it expires undecided
	// (0 = DefaultTTL).
	TTL time.Duration `yaml:"ttl"`
	// ValidFor is how long an approval may wait to be used (0 = TTL).
	ValidFor time.Duration `yaml:"valid_for"`
	// Approvers are the roles that may decide (empty = DefaultApprovers).
	Approvers []string `yaml:"approvers"`
	// Summary is a text/template shown to the approver (empty = "METHOD PATH").
	Summary string `yaml:"summary"`
	// Reversible tells approvers whether the effect can be undone.
	Reversible bool `yaml:"reversible"`
}

// Policy is a compiled Config. It is immutable and safe for concurrent use.
type Policy struct {
	when       cel.Program        // nil: always required
	guards     []guard            // body fields when compares with literals
	summary    *template.Template // nil: "METHOD PATH"
	ttl        time.Duration
	validFor   time.Duration
	approvers  []string
	reversible bool
}

// Compile checks c and compiles its expression and template, so that every
// mistake in it surfaces at start-up, named by its field.
func Compile(c Config) (*Policy, error) {
	p := &Policy{reversible: c.Reversible}

	switch {
	case c.TTL < 0:
		return nil, errors.New("ttl: must not be negative")
	case c.TTL == 0:
		p.ttl = DefaultTTL
	default:
		p.ttl = c.TTL
	}
	switch {
	case c.ValidFor < 0:
		return nil, errors.New("valid_for: must not be negative")
	case c.ValidFor == 0:
		p.validFor = p.ttl
	default:
		p.validFor = c.ValidFor
	}

	p.approvers = slices.Clone(c.Approvers)
	if len(p.approvers) == 0 {
		p.approvers = slices.Clone(DefaultApprovers)
	}
	for _, r := range p.approvers {
		if strings.TrimSpace(r) == "" {
			return nil, errors.New("approvers: empty role")
		}
	}

	if strings.TrimSpace(c.When) != "" {
		prg, guards, err := compileWhen(c.When)
		if err != nil {
			return nil, fmt.Errorf("when: %w", err)
		}
		p.when, p.guards = prg, guards
	}

	if strings.TrimSpace(c.Summary) != "" {
		t, err := compileSummary(c.Summary)
		if err != nil {
			return nil, fmt.Errorf("summary: %w", err)
		}
		p.summary = t
	}
	return p, nil
}

// TTL is how long a pending request waits for a decision.
func (p *Policy) TTL() time.Duration { return p.ttl }

// ValidFor is how long an approval stays usable after it is given.
func (p *Policy) ValidFor() time.Duration { return p.validFor }

// Approvers returns the roles that may decide. It returns a copy, so a caller
// cannot change the policy other requests see.
func (p *Policy) Approvers() []string { return slices.Clone(p.approvers) }

// Reversible reports whether the route declared its effect undoable, which
// approvers weigh when deciding.
func (p *Policy) Reversible() bool { return p.reversible }

// Required reports whether in needs an approval. A failed evaluation is an
// error, not false: a condition that cannot be decided must not let the
// request through unapproved.
func (p *Policy) Required(in Input) (bool, error) {
	if p.when == nil {
		return true, nil
	}
	for _, g := range p.guards {
		if err := g.check(in.Body); err != nil {
			return false, fmt.Errorf("approval.when: %w", err)
		}
	}
	out, _, err := p.when.Eval(&activation{in: in})
	if err != nil {
		return false, fmt.Errorf("approval.when: %w", err)
	}
	b, ok := out.(types.Bool)
	if !ok {
		return false, fmt.Errorf("approval.when: result is %s, not bool", out.Type().TypeName())
	}
	return bool(b), nil
}

// Summary renders what the approver is shown for in, at most 1000 bytes. A
// key the template names but in lacks is an error rather than "<no value>",
// so an approver is never asked to approve a blank.
func (p *Policy) Summary(in Input) (string, error) {
	if p.summary == nil {
		return bound(in.Method + " " + in.Path), nil
	}
	w := &capWriter{buf: make([]byte, 0, 128)}
	err := p.summary.Execute(w, map[string]any{
		"method":  in.Method,
		"path":    in.Path,
		"params":  in.Params,
		"query":   in.Query,
		"body":    in.Body,
		"args":    in.Body, // a tool call's arguments, by their MCP name
		"headers": in.Headers,
		"principal": map[string]any{
			"name":   in.Principal.Name,
			"tenant": in.Principal.Tenant,
			"roles":  in.Principal.Roles,
		},
	})
	switch {
	case w.full:
		return truncate(w.buf), nil
	case err != nil:
		return "", fmt.Errorf("approval.summary: %w", err)
	}
	return string(w.buf), nil
}

// compileSummary parses the template and rejects the constructs whose running
// time does not depend on the request: without them a render costs at most
// one pass over the body per range, and output is capped.
func compileSummary(src string) (*template.Template, error) {
	t, err := template.New("summary").Option("missingkey=error").Parse(src)
	if err != nil {
		return nil, err
	}
	if len(t.Templates()) > 1 {
		return nil, errors.New("define and block are not allowed")
	}
	if err := checkNode(t.Tree.Root, false); err != nil {
		return nil, err
	}
	return t, nil
}

// checkNode walks a template tree. {{template}} would allow recursion, range
// over a number literal a loop of any length, and range within range a
// quadratic walk of the body; a one-line summary needs none of them.
func checkNode(n parse.Node, inRange bool) error {
	switch n := n.(type) {
	case *parse.ListNode:
		if n == nil {
			return nil
		}
		for _, c := range n.Nodes {
			if err := checkNode(c, inRange); err != nil {
				return err
			}
		}
	case *parse.TemplateNode:
		return errors.New("template is not allowed")
	case *parse.IfNode:
		return checkBranch(&n.BranchNode, inRange)
	case *parse.WithNode:
		return checkBranch(&n.BranchNode, inRange)
	case *parse.RangeNode:
		if inRange {
			return errors.New("range within range is not allowed")
		}
		for _, cmd := range n.Pipe.Cmds {
			for _, arg := range cmd.Args {
				if _, ok := arg.(*parse.NumberNode); ok {
					return errors.New("range over a number is not allowed")
				}
			}
		}
		return checkBranch(&n.BranchNode, true)
	}
	return nil
}

// checkBranch checks both arms of an if, with or range.
func checkBranch(b *parse.BranchNode, inRange bool) error {
	if err := checkNode(b.List, inRange); err != nil {
		return err
	}
	return checkNode(b.ElseList, inRange)
}

// errFull stops a template once its output passes maxSummary, so a template
// looping over a large body stops early instead of rendering it all.
var errFull = errors.New("summary too long")

// capWriter keeps the first maxSummary+1 bytes written to it; the extra byte
// is how it tells output that fits from output that must be cut.
type capWriter struct {
	buf  []byte
	full bool
}

// Write implements io.Writer.
func (w *capWriter) Write(b []byte) (int, error) {
	if room := maxSummary + 1 - len(w.buf); len(b) > room {
		w.buf = append(w.buf, b[:room]...)
		w.full = true
		return room, errFull
	}
	w.buf = append(w.buf, b...)
	return len(b), nil
}

// bound caps s at maxSummary bytes.
func bound(s string) string {
	if len(s) <= maxSummary {
		return s
	}
	return truncate([]byte(s))
}

// truncate cuts b, known to exceed maxSummary, at a rune boundary so that it
// and the ellipsis fit in maxSummary bytes.
func truncate(b []byte) string {
	const ellipsis = "…"
	cut := maxSummary - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(b[cut]) {
		cut--
	}
	return string(b[:cut]) + ellipsis
}

// env is the one CEL environment every policy compiles against; building it
// is the slow part, and it never varies.
var env = sync.OnceValues(newEnv)
