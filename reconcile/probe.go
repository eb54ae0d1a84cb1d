// Package reconcile settles unknown operations from proof (docs/design.md,
// "Reconciliation"): a route's probe is a request template, rendered from
// the write at its reservation, and two CEL expressions over the probe's
// answer that say whether the write was applied or not. The Reconciler
// claims due operations from the store, one owner at a time, sends their
// probes, and records each verdict with its evidence.
package reconcile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"text/template"
	"time"

	"cel.dev/cel-go/cel"

	"github.com/idemgate/idemgate/ledger"
)

// Config is a route's `reconcile:` block.
type Config struct {
	// Probe is "METHOD /path?query", a text/template over .params, .query
	// and .body of the write; every value is URL-escaped as it is put in.
	Probe string `yaml:"probe"`
	// Applied and NotApplied are CEL over the probe's answer: status (int),
	// headers (map of name to list of values), body (its JSON, or null).
	Applied    string `yaml:"applied"`
	NotApplied string `yaml:"not_applied"`
	// Every paces the probes of one operation (30s), doubled after each
	// inconclusive one up to 32 times; GiveUpAfter (24h) is when the
	// reconciler stops, counted from when it became unknown, and leaves it
	// for an operator.
	Every       time.Duration `yaml:"every"`
	GiveUpAfter time.Duration `yaml:"give_up_after"`
}

// Probe is a compiled Config.
type Probe struct {
	method              string
	target              *template.Template
	applied, notApplied cel.Program
	every, giveUp       time.Duration
}

// costLimit bounds one expression's evaluation over a probe's answer.
const costLimit = 1_000_000

// maxTarget bounds a rendered probe request.
const maxTarget = 2048

// Compile checks everything it can at start-up: the template parses, its
// method is one that reads, and both expressions type-check as bool.
func Compile(c Config) (*Probe, error) {
	method, path, ok := strings.Cut(strings.TrimSpace(c.Probe), " ")
	if !ok || (method != http.MethodGet && method != http.MethodHead) || !strings.HasPrefix(path, "/") {
		return nil, errors.New(`probe: want "GET /path…" (or HEAD): a probe only reads`)
	}
	t, err := template.New("probe").Option("missingkey=error").Parse(path)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	p := &Probe{method: method, target: t, every: c.Every, giveUp: c.GiveUpAfter}
	if p.applied, err = compile("applied", c.Applied); err != nil {
		return nil, err
	}
	if p.notApplied, err = compile("not_applied", c.NotApplied); err != nil {
		return nil, err
	}
	if p.every <= 0 {
		p.every = 30 * time.Second
	}
	if p.giveUp <= 0 {
		p.giveUp = 24 * time.Hour
	}
	return p, nil
}

func compile(name, src string) (cel.Program, error) {
	if strings.TrimSpace(src) == "" {
		return nil, fmt.Errorf("%s: an expression is required", name)
	}
	env, err := cel.NewEnv(cel.Variable("status", cel.IntType),
		cel.Variable("headers", cel.MapType(cel.StringType, cel.ListType(cel.StringType))),
		cel.Variable("body", cel.DynType), cel.CrossTypeNumericComparisons(true))
	if err != nil {
		return nil, err
	}
	ast, iss := env.Compile(src)
	if iss.Err() != nil {
		return nil, fmt.Errorf("%s: %w", name, iss.Err())
	}
	if t := ast.OutputType(); !t.IsExactType(cel.BoolType) && !t.IsExactType(cel.DynType) {
		return nil, fmt.Errorf("%s: must be bool, not %s", name, t)
	}
	prg, err := env.Program(ast, cel.CostLimit(costLimit))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return prg, nil
}

// Render is the probe request for one write: "GET /path?query". It must
// stay on the upstream: an absolute or odd target is refused.
func (p *Probe) Render(params map[string]string, query map[string][]string, body any) (string, error) {
	var b bytes.Buffer
	data := map[string]any{"params": escaped(params), "query": escaped(query), "body": escaped(body)}
	if err := p.target.Execute(&b, data); err != nil {
		return "", fmt.Errorf("probe: %w", err)
	}
	target := b.String()
	u, err := url.ParseRequestURI(target)
	switch {
	case err != nil, b.Len() > maxTarget, !strings.HasPrefix(target, "/"), strings.HasPrefix(target, "//"),
		u.Host != "", strings.ContainsAny(target, " \t\r\n"):
		return "", fmt.Errorf("probe: %q is not a path on the upstream", target)
	}
	return p.method + " " + target, nil
}

// escaped is v with every string escaped for a URL (a path segment or a
// query value alike): a value that holds "&", "#", "/" or "%" must not
// change which record the probe looks up.
func escaped(v any) any {
	switch v := v.(type) {
	case string:
		return strings.ReplaceAll(url.QueryEscape(v), "+", "%20")
	case map[string]string:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = escaped(x)
		}
		return out
	case map[string][]string:
		out := make(map[string]any, len(v))
		for k, xs := range v {
			out[k] = escaped(anySlice(xs))
		}
		return out
	case map[string]any:
		out := make(map[string]any, len(v))
		for k, x := range v {
			out[k] = escaped(x)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			out[i] = escaped(x)
		}
		return out
	}
	return v
}

func anySlice(xs []string) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

// Judge reads a probe's answer: applied, not applied, or inconclusive
// (neither expression holds, both do, or the answer does not parse).
func (p *Probe) Judge(status int, header http.Header, body []byte) ledger.Verdict {
	var doc any
	if len(bytes.TrimSpace(body)) > 0 && json.Unmarshal(body, &doc) != nil {
		doc = nil
	}
	vars := map[string]any{"status": status, "headers": map[string][]string(header), "body": doc}
	applied, notApplied := holds(p.applied, vars), holds(p.notApplied, vars)
	switch {
	case applied && !notApplied:
		return ledger.Applied
	case notApplied && !applied:
		return ledger.NotApplied
	}
	return ledger.Inconclusive
}

// holds evaluates prg; an error (a missing field) is "does not hold".
func holds(prg cel.Program, vars map[string]any) bool {
	out, _, err := prg.Eval(vars)
	if err != nil {
		return false
	}
	v, ok := out.Value().(bool)
	return ok && v
}

// Next is when an operation's next probe is due after its n-th
// inconclusive one: Every, doubled each time, at most 32 times Every.
func (p *Probe) Next(n int) time.Duration { return p.every << min(max(n-1, 0), 5) }

// GaveUp reports whether an operation unknown since then is past the
// probe's patience: it then waits for an operator.
func (p *Probe) GaveUp(since, now time.Time) bool { return now.Sub(since) > p.giveUp }
