package config

import (
	"fmt"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/jsonptr"
	"github.com/idemgate/idemgate/reconcile"
)

// Action is one action: an effect its callers perform themselves
// (an e-mail, a file, a vendor SDK's call, a no-code step), reserved at
// POST /_idem/v1/actions/{name} and ended with owner steps
// (docs/design.md, "Actions").
type Action struct {
	Name string `yaml:"name"`
	// Lease is how long the owner has to complete or heartbeat (30s).
	Lease time.Duration `yaml:"lease"`
	// Retention is how long a final operation's key is remembered (24h).
	Retention time.Duration `yaml:"retention"`
	// Schema validates the command as a route's body (a JSON Schema file).
	Schema         string `yaml:"schema"`
	BusinessKey    string `yaml:"business_key"`
	ConcurrencyKey string `yaml:"concurrency_key"`
	// Approval asks a human before the effect, as a route's.
	Approval *approval.Config `yaml:"approval"`
	// Roles, if set, are the roles that may reserve the action.
	Roles []string `yaml:"roles"`
	// MaxBody bounds the command (1MiB); MaxResult a recorded result (64KiB).
	MaxBody   Size `yaml:"max_body"`
	MaxResult Size `yaml:"max_result"`
	// Upstream and Reconcile declare the probe that settles the action's
	// unknown operations from proof: a GET sent to that upstream, and CEL
	// over its answer, as a route's.
	Upstream  string            `yaml:"upstream"`
	Reconcile *reconcile.Config `yaml:"reconcile"`

	line          int
	approvalLines map[string]int
	policy        *approval.Policy
	probe         *reconcile.Probe
	validate      func(any) (any, error)
}

// Action is the configured action named name, or nil.
func (c *Config) Action(name string) *Action {
	for _, a := range c.Actions {
		if a.Name == name {
			return a
		}
	}
	return nil
}

// checkActions validates every action, and fills its defaults.
func (c *Config) checkActions() error {
	seen := map[string]bool{}
	for _, a := range c.Actions {
		if a == nil {
			return fmt.Errorf("%s: an action is empty", c.file)
		}
		if seen[a.Name] {
			return c.errorf(a.line, "action %q is defined twice", a.Name)
		}
		seen[a.Name] = true
		if err := c.checkAction(a); err != nil {
			return err
		}
	}
	return nil
}

func (c *Config) checkAction(a *Action) error {
	what := "action " + a.Name
	switch {
	case !contract.ValidActionName(a.Name):
		return c.errorf(a.line, "action %q: want a name of [a-z0-9._-], starting with a letter or digit, at most 128", a.Name)
	case a.Lease < 0 || a.Retention < 0 || a.MaxBody < 0 || a.MaxResult < 0:
		return c.errorf(a.line, "%s: lease, retention, max_body and max_result must be positive", what)
	case (a.Reconcile == nil) != (a.Upstream == ""):
		return c.errorf(a.line, "%s: reconcile and upstream go together: the probe is sent to that upstream", what)
	}
	for _, p := range []string{a.BusinessKey, a.ConcurrencyKey} {
		if toks, err := jsonptr.Parse(p); err != nil || (p != "" && len(toks) == 0) {
			return c.errorf(a.line, "%s: JSON pointer %q: want /member/…", what, p)
		}
	}
	if a.Lease == 0 {
		a.Lease = 30 * time.Second
	}
	if a.MaxResult == 0 {
		a.MaxResult = contract.DefaultMaxResult
	}
	a.Schema = c.relative(a.Schema)
	var err error
	if a.Schema != "" {
		if a.validate, err = loadSchema(a.Schema); err != nil {
			return c.errorf(a.line, "action %s: schema: %v", a.Name, err)
		}
	}
	if a.Approval != nil {
		if a.policy, err = c.compileApproval(*a.Approval, a.line, a.approvalLines, what); err != nil {
			return err
		}
	}
	if a.Reconcile == nil {
		return nil
	}
	if _, ok := c.Upstreams[a.Upstream]; !ok {
		return c.errorf(a.line, "%s: upstream %q is not defined", what, a.Upstream)
	}
	if a.probe, err = reconcile.Compile(*a.Reconcile); err != nil {
		return c.errorf(a.line, "%s: reconcile: %v", what, err)
	}
	return nil
}

// Policy is the action's approval policy, compiled (nil: none); Probe its
// reconciliation probe (nil: none); Validator its schema's check of a
// command (nil: none).
func (a *Action) Policy() *approval.Policy          { return a.policy }
func (a *Action) Probe() *reconcile.Probe           { return a.probe }
func (a *Action) Validator() func(any) (any, error) { return a.validate }
