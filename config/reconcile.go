package config

import "github.com/idemgate/idemgate/reconcile"

// checkReconcile compiles a route's probe at start-up: a template that
// does not parse, a probe that writes, or an expression that does not
// type-check is an error naming the route's line.
func (c *Config) checkReconcile(r *Route) error {
	if r.Reconcile == nil {
		return nil
	}
	if !r.IsWrite() {
		return c.errorf(r.line, "route %s: reconcile: only a write route has operations to reconcile", r.Match)
	}
	p, err := reconcile.Compile(*r.Reconcile)
	if err != nil {
		return c.errorf(r.line, "route %s: reconcile: %v", r.Match, err)
	}
	r.probe = p
	return nil
}
