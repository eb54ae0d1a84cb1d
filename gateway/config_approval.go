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
	p, err := c.compileApproval(*r.Approval, r.line, r.approvalLines, "route "+r.Match)
	r.policy = p
	return err
}

// compileApproval compiles an approval policy, its errors naming the line
// of the key at fault (lines: the approval's keys; line: its owner's).
func (c *Config) compileApproval(cfg approval.Config, line int, lines map[string]int, what string) (*approval.Policy, error) {
	p, err := approval.Compile(cfg)
	if err != nil {
		field, _, _ := strings.Cut(err.Error(), ":")
		if l, ok := lines[field]; ok {
			line = l
		} else if l, ok := lines["when"]; ok && strings.HasPrefix(field, "when") {
			line = l
		}
		return nil, c.errorf(line, "%s: approval: %v", what, err)
	}
	return p, nil
}
