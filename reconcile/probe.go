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
	// and .body of the write. It holds values ({{.body.ref}}, {{index
	// .query.id 0}}) and no branches or loops; each value must be a string,
	// an integer or a boolean, and is escaped for its place (see places.go).
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
	prefix              string // the template's literal path, up to its first value
	applied, notApplied cel.Program
	every, giveUp       time.Duration
}

// costLimit bounds one expression's evaluation over a probe's answer.
const costLimit = 1_000_000

// maxTarget bounds a rendered probe request.
const maxTarget = 2048

// Compile checks everything it can at start-up: the template parses and
// holds only values whose place (path or query) its text tells, its method
// is one that reads, and both expressions type-check as bool.
func Compile(c Config) (*Probe, error) {
	method, path, ok := strings.Cut(strings.TrimSpace(c.Probe), " ")
	if !ok || (method != http.MethodGet && method != http.MethodHead) || !strings.HasPrefix(path, "/") {
		return nil, errors.New(`probe: want "GET /path…" (or HEAD): a probe only reads`)
	}
	t, err := template.New("probe").Option("missingkey=error").Parse(path)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	prefix, err := placeValues(t)
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	p := &Probe{method: method, target: t, prefix: prefix, every: c.Every, giveUp: c.GiveUpAfter}
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

// Render is the probe request for one write: "GET /path?query". Each
// value must be a scalar (see scalar), and the result must pass Check; an
// error names the value's place in the template, never the value, which
// may be a secret of the body.
func (p *Probe) Render(params map[string]string, query map[string][]string, body any) (string, error) {
	var b bytes.Buffer
	data := map[string]any{"params": params, "query": query, "body": body}
	if err := p.target.Execute(&b, data); err != nil {
		var v *valueError
		if errors.As(err, &v) {
			return "", fmt.Errorf("probe: %w", v)
		}
		return "", fmt.Errorf("probe: %w", err)
	}
	if err := p.Check(b.String()); err != nil {
		return "", fmt.Errorf("probe: the rendered request %w", err)
	}
	return p.method + " " + b.String(), nil
}

// Check reports why target may not be sent as this probe, or nil: it must
// be a path on the upstream (no scheme, host or fragment), under the
// template's literal path, with no dot segment even once unescaped. The
// reconciler checks a stored probe again before it sends it, so that one
// rendered by an older version, or written by hand, is not trusted.
func (p *Probe) Check(target string) error {
	path, _, _ := strings.Cut(target, "?")
	u, err := url.ParseRequestURI(target)
	switch {
	case err != nil, len(target) > maxTarget, !strings.HasPrefix(target, "/"), strings.HasPrefix(target, "//"),
		u.Scheme != "", u.Host != "", strings.ContainsAny(target, " \t\r\n#\\"):
		return errors.New("is not a path on the upstream")
	case !strings.HasPrefix(path, p.prefix):
		return fmt.Errorf("is not under the probe's path %s", p.prefix)
	}
	if dec, err := url.PathUnescape(path); err != nil || hasDotSegment(dec) {
		return errors.New("holds a dot segment")
	}
	return nil
}

// checkRequest is Check of a stored probe, its method included: it only
// reads, with its route's method.
func (p *Probe) checkRequest(method, target string) error {
	if method != p.method {
		return fmt.Errorf("is not a %s", p.method)
	}
	return p.Check(target)
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
