package config

import (
	"slices"
	"strings"
)

// This file is tenants: the tenants a gateway expects (docs/design.md,
// "Identity, transport and operations"). The configuration names some
// by itself (its principals', consumers' and webhook routes'), but a
// JWT's tenant is a claim, known only when a token comes: tenants:
// names them beforehand, so that the metrics' series of each start at
// zero, and, once written, bounds them: a token of another tenant is
// refused, and so is a principal, consumer or webhook route of one.

// checkTenants checks each tenant named, and, with tenants: written,
// that every tenant the configuration names elsewhere is one of them.
func (c *Config) checkTenants() error {
	line := c.lines["tenants"]
	for _, t := range c.Tenants {
		if err := checkValue(t); err != nil || strings.Contains(t, ":") {
			return c.errorf(line, "tenants: %q: want a tenant's name, without ':'", t)
		}
	}
	if len(c.Tenants) == 0 {
		return nil
	}
	for _, p := range c.Principals {
		if !c.allows(p.Tenant) {
			return c.errorf(p.line, "principal %q: tenant %q is not in tenants:", p.Name, p.Tenant)
		}
	}
	for _, k := range c.Consumers {
		if !c.allows(k.Tenant) {
			return c.errorf(k.line, "consumer %q: tenant %q is not in tenants:", k.Name, k.Tenant)
		}
	}
	for _, r := range c.Routes {
		if r.Webhook != nil && !c.allows(r.Webhook.Tenant) {
			return c.errorf(r.line, "route %s: webhook tenant %q is not in tenants:", r.Match, r.Webhook.Tenant)
		}
	}
	return nil
}

// allows reports whether tenant is one this gateway serves: any, unless
// tenants: names them.
func (c *Config) allows(tenant string) bool {
	return len(c.Tenants) == 0 || slices.Contains(c.Tenants, tenant)
}

// KnownTenants are the tenants the configuration names, sorted: those of
// tenants:, and its principals', consumers' and webhook routes'. A JWT's
// tenant is none of them until tenants: names it.
func (c *Config) KnownTenants() []string {
	out := slices.Clone(c.Tenants)
	for _, p := range c.Principals {
		out = append(out, p.Tenant)
	}
	for _, k := range c.Consumers {
		out = append(out, k.Tenant)
	}
	for _, r := range c.Routes {
		if r.Webhook != nil {
			out = append(out, r.Webhook.Tenant)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
