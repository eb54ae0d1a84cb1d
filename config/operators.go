package config

import "slices"

// This file is operators: the principals who may act on the whole
// gateway, every tenant's (docs/design.md, "Identity, transport and
// operations"): a reload of the configuration ends every tenant's
// sessions and changes every tenant's routes, so a tenant's admin
// role, which a tenant (or its identity provider) grants, is not enough.

// checkOperators checks that each operator names a configured
// principal: a JWT's principal (jwt:…), whose name its issuer chooses,
// never is one.
func (c *Config) checkOperators() error {
	for _, name := range c.Operators {
		if !slices.ContainsFunc(c.Principals, func(p *Principal) bool { return p.Name == name }) {
			return c.errorf(c.lines["operators"], "operators: %q is no configured principal's name (a JWT's "+
				"principal cannot be an operator)", name)
		}
	}
	return nil
}

// IsOperator reports whether the principal name of tenant is one of the
// configured principals operators: names.
func (c *Config) IsOperator(name, tenant string) bool {
	if !slices.Contains(c.Operators, name) {
		return false
	}
	return slices.ContainsFunc(c.Principals, func(p *Principal) bool { return p.Name == name && p.Tenant == tenant })
}
