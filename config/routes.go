package config

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/jsonptr"
	"github.com/idemgate/idemgate/reconcile"
)

// Route is one configured method and path.
type Route struct {
	Match       string        `yaml:"match"`
	Upstream    string        `yaml:"upstream"`
	RequireKey  *bool         `yaml:"require_key"`
	Retention   time.Duration `yaml:"retention"`
	Lease       time.Duration `yaml:"lease"`
	MaxBody     Size          `yaml:"max_body"`
	Fingerprint struct {
		Headers     []string `yaml:"headers"`
		Ignore      []string `yaml:"ignore"`
		IgnoreQuery []string `yaml:"ignore_query"`
	} `yaml:"fingerprint"`
	// Body is "opaque" for a route whose bodies are neither JSON nor forms:
	// they are fingerprinted as their bytes and media type.
	Body           string `yaml:"body"`
	Schema         string `yaml:"schema"`
	BusinessKey    string `yaml:"business_key"`
	KeyFrom        string `yaml:"key_from"`
	ConcurrencyKey string `yaml:"concurrency_key"`
	// Outcomes lists upstream statuses known to mean "not applied" (the
	// operation is released) or "final" (stored and replayed), beyond
	// docs/design.md's defaults.
	Outcomes Outcomes `yaml:"outcomes"`
	// Roles, if set, are the roles allowed to call the route.
	Roles []string `yaml:"roles"`
	// Approval asks a human before the route's effect (docs/design.md,
	// "Approvals").
	Approval *approval.Config `yaml:"approval"`
	// ResultRef names where the upstream's answer holds its reference for
	// the effect: body:/id or header:X-Request-Id.
	ResultRef string `yaml:"result_ref"`
	// Reconcile declares the probe that settles the route's unknown
	// operations from proof (docs/design.md, "Reconciliation").
	Reconcile *reconcile.Config `yaml:"reconcile"`
	// Webhook authenticates the route by its sender's signature instead
	// of a bearer token (docs/design.md, "Inbox: messages and webhooks").
	Webhook *Webhook `yaml:"webhook"`

	line          int
	approvalLines map[string]int // each approval key's own line
	webhookLines  map[string]int // each webhook key's own line
	method        string
	pattern       string
	policy        *approval.Policy
	probe         *reconcile.Probe
	validate      func(any) (any, error)
}

func (c *Config) checkRoute(r *Route, mux *http.ServeMux) (err error) {
	method, pattern, ok := strings.Cut(strings.TrimSpace(r.Match), " ")
	pattern = strings.TrimSpace(pattern)
	if !ok || method == "" || !strings.HasPrefix(pattern, "/") || strings.ToUpper(method) != method {
		return c.errorf(r.line, "route %q: want match: METHOD /path/{param}", r.Match)
	}
	r.method, r.pattern = method, pattern
	if _, ok := c.Upstreams[r.Upstream]; !ok {
		return c.errorf(r.line, "route %s: upstream %q is not defined", r.Match, r.Upstream)
	}
	if err := c.checkApproval(r); err != nil {
		return err
	}
	if err := c.checkReconcile(r); err != nil {
		return err
	}
	if err := c.checkWebhook(r); err != nil {
		return err
	}
	if err := r.checkPolicies(); err != nil {
		return c.errorf(r.line, "route %s: %v", r.Match, err)
	}
	if r.Schema != "" {
		r.Schema = c.relative(r.Schema)
		if r.validate, err = loadSchema(r.Schema); err != nil {
			return c.errorf(r.line, "route %s: schema: %v", r.Match, err)
		}
	}
	defer func() {
		if p := recover(); p != nil { // ServeMux panics on bad or conflicting patterns
			err = c.errorf(r.line, "route %s: %v", r.Match, p)
		}
	}()
	mux.Handle(r.method+" "+r.pattern, http.NotFoundHandler())
	return nil
}

// checkPolicies refuses policies that cannot work, before a single request
// is served.
func (r *Route) checkPolicies() error {
	for _, p := range append(slices.Clone(r.Fingerprint.Ignore), r.BusinessKey, r.ConcurrencyKey) {
		if toks, err := jsonptr.Parse(p); err != nil || (p != "" && len(toks) == 0) {
			return fmt.Errorf("JSON pointer %q: want /member/…", p)
		}
	}
	if kind, ref, _ := strings.Cut(r.KeyFrom, ":"); r.KeyFrom != "" &&
		!(kind == "header" && ref != "") && !(kind == "body" && strings.HasPrefix(ref, "/")) {
		return fmt.Errorf("key_from %q: want header:NAME or body:/pointer", r.KeyFrom)
	}
	if r.Lease < 0 || r.Retention < 0 {
		return errors.New("lease and retention must be positive")
	}
	if r.Body != "" && r.Body != "opaque" {
		return fmt.Errorf("body %q: the only setting is opaque (JSON and form bodies are read by default)", r.Body)
	}
	return r.Outcomes.check()
}

// Outcomes lists upstream statuses known to mean "not applied" (the
// operation is released, and run again by its retry) or "final" (stored
// and replayed), beyond docs/design.md's defaults: a route's, or a
// consumer's.
type Outcomes struct {
	NotApplied []int `yaml:"not_applied"`
	Final      []int `yaml:"final"`
}

func (o Outcomes) check() error {
	for _, st := range append(slices.Clone(o.NotApplied), o.Final...) {
		if st < 400 || st > 599 {
			// A success marked "not applied" would be run again: a second effect.
			return fmt.Errorf("outcomes: %d: only 4xx and 5xx statuses can be listed", st)
		}
		if slices.Contains(o.NotApplied, st) && slices.Contains(o.Final, st) {
			return fmt.Errorf("outcomes: %d is both not_applied and final", st)
		}
	}
	return nil
}

// Classify is docs/design.md's mapping with these exceptions.
func (o Outcomes) Classify(status int) contract.Fate {
	switch {
	case slices.Contains(o.NotApplied, status):
		return contract.FateReleased
	case slices.Contains(o.Final, status):
		return contract.FateFailed
	}
	return contract.DefaultClassify(status)
}

// Method and Pattern are the route's method and path pattern (Match,
// split and checked).
func (r *Route) Method() string  { return r.method }
func (r *Route) Pattern() string { return r.pattern }

// Policy is the route's approval policy, compiled (nil: none); Probe its
// reconciliation probe (nil: none); Validator its schema's check of a
// command (nil: none).
func (r *Route) Policy() *approval.Policy          { return r.policy }
func (r *Route) Probe() *reconcile.Probe           { return r.probe }
func (r *Route) Validator() func(any) (any, error) { return r.validate }

// IsWrite reports whether the route records operations: every method but
// GET, HEAD and OPTIONS.
func (r *Route) IsWrite() bool {
	switch r.method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return false
	}
	return true
}
