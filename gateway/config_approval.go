package gateway

import (
	"strings"

	"github.com/idemgate/idemgate/approval"
)

// checkApproval compiles a route's approval policy at start-up: a CEL
// expression that does not type-check, or a template that does not parse,
// is an error naming the line of its key, never a surprise at the first
// production deployment.
func (c *Config) checkApproval(r *RouteConfig) error {
	if r.Approval == nil {
		return nil
	}
	if !r.IsWrite() {
		return c.errorf(r.line, "route %s: approval: only write routes can ask for one", r.Match)
	}
	if r.RequireKey != nil && !*r.RequireKey {
		// A keyless request is forwarded unrecorded: unapproved.
		return c.errorf(r.line, "route %s: approval: needs require_key (a keyless request would run unapproved)", r.Match)
	}
	p, err := approval.Compile(*r.Approval)
	if err != nil {
		line := r.line
		field, _, _ := strings.Cut(err.Error(), ":")
		if l, ok := r.approvalLines[field]; ok {
			line = l
		} else if l, ok := r.approvalLines["when"]; ok && strings.HasPrefix(field, "when") {
			line = l
		}
		return c.errorf(line, "route %s: approval: %v", r.Match, err)
	}
	r.policy = p
	return nil
}
