package config

import (
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idemgate/idemgate/limits"
)

// This file is the configuration's limits: docs/design.md's per-tenant request
// rate and budgets, a default and per-tenant overrides.

// Limits is docs/design.md's per-tenant limits: a default for every
// tenant, and per-tenant settings that override it field by field.
type Limits struct {
	Default Limit            `yaml:"default"`
	Tenants map[string]Limit `yaml:"tenants"`
	// UsageInterval is how stale a tenant's usage may get (10s).
	UsageInterval time.Duration `yaml:"usage_interval"`

	lines map[string]int // "default", "tenants.NAME": where each is set
}

// Limit is one tenant's limits; an unset field takes the default's, and 0
// means unlimited.
type Limit struct {
	Rate      *string `yaml:"rate"` // "100/s", "6000/m"
	Burst     *int    `yaml:"burst"`
	MaxLive   *int64  `yaml:"max_live"`
	MaxStored *Size   `yaml:"max_stored"`
	// MaxPendingApprovals bounds the approvals waiting for a person at
	// once: an inbox people can read, whatever an agent asks.
	MaxPendingApprovals *int64 `yaml:"max_pending_approvals"`
}

// Built-in limits, for a configuration that sets none: generous for one
// agent fleet, and a bound on what one tenant can fill the disk and the
// approvers' inbox with.
var builtinLimit = Limit{Rate: ptr("1000/s"), Burst: ptr(2000), MaxLive: ptr(int64(10000)), MaxStored: ptr(Size(1 << 30)),
	MaxPendingApprovals: ptr(int64(100))}

func ptr[T any](v T) *T { return &v }

// over returns l with the fields o sets taken from o.
func (l Limit) over(o Limit) Limit {
	if o.Rate != nil {
		l.Rate = o.Rate
	}
	if o.Burst != nil {
		l.Burst = o.Burst
	}
	if o.MaxLive != nil {
		l.MaxLive = o.MaxLive
	}
	if o.MaxStored != nil {
		l.MaxStored = o.MaxStored
	}
	if o.MaxPendingApprovals != nil {
		l.MaxPendingApprovals = o.MaxPendingApprovals
	}
	return l
}

// Policy returns the limits of a tenant.
func (c *Config) Policy(tenant string) limits.Policy {
	l := builtinLimit.over(c.Limits.Default).over(c.Limits.Tenants[tenant])
	r, _ := limits.ParseRate(*l.Rate) // checked at load
	return limits.Policy{Rate: r, Burst: *l.Burst, MaxLive: *l.MaxLive, MaxStored: int64(*l.MaxStored),
		MaxPending: *l.MaxPendingApprovals}
}

// limitLines finds where each limit is set in the limits: node.
func limitLines(line int, n *yaml.Node) map[string]int {
	lines := map[string]int{"default": line}
	for i := 0; i+1 < len(n.Content); i += 2 {
		switch key, val := n.Content[i], n.Content[i+1]; key.Value {
		case "default":
			lines["default"] = key.Line
		case "tenants":
			for j := 0; j+1 < len(val.Content); j += 2 {
				lines["tenants."+val.Content[j].Value] = val.Content[j].Line
			}
		}
	}
	return lines
}

// checkLimits refuses limits that cannot be read or make no sense.
func (c *Config) checkLimits() error {
	all := map[string]Limit{"default": c.Limits.Default}
	for name, l := range c.Limits.Tenants {
		all["tenants."+name] = l
	}
	for name, l := range all {
		l = builtinLimit.over(l)
		if _, err := limits.ParseRate(*l.Rate); err != nil {
			return c.errorf(c.Limits.lines[name], "limits.%s: %v", name, err)
		}
		if *l.Burst < 0 || *l.MaxLive < 0 || *l.MaxStored < 0 || *l.MaxPendingApprovals < 0 {
			return c.errorf(c.Limits.lines[name], "limits.%s: burst, max_live, max_stored and max_pending_approvals "+
				"must be 0 (unlimited) or more", name)
		}
	}
	if c.Limits.UsageInterval <= 0 {
		c.Limits.UsageInterval = 10 * time.Second
	}
	return nil
}
