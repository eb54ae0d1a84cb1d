package config

import (
	"strings"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
)

// checkApproval compiles a route's approval policy at start-up: a CEL
// expression that does not type-check, or a template that does not parse,
// is an error naming the line of its key, never a surprise at the first
// production deployment.
func (c *Config) checkApproval(r *Route) error {
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

// Approvers are the roles that may decide an approval of the operations
// of route ("METHOD /path", "action:NAME", "mcp:SERVER/TOOL"), as this
// configuration's policy for it says; false if none asks for approvals
// there (the route gone, or its policy): an approval already open is
// then decided under its own list alone.
func (c *Config) Approvers(route string) ([]string, bool) {
	var p *approval.Policy
	if name, ok := contract.ActionOf(route); ok {
		if a := c.Action(name); a != nil {
			p = a.policy
		}
	} else if server, tool, ok := contract.MCPOf(route); ok {
		p = c.mcpPolicy(server, tool)
	} else {
		for _, r := range c.Routes {
			if strings.TrimSpace(r.Match) == route {
				p = r.policy
			}
		}
	}
	if p == nil {
		return nil, false
	}
	return p.Approvers(), true
}

// mcpPolicy is the approval policy of an MCP server's tool, if any.
func (c *Config) mcpPolicy(server, tool string) *approval.Policy {
	for _, s := range c.MCPServers {
		if s.Name == server && s.Tools[tool] != nil {
			return s.Tools[tool].Policy
		}
	}
	return nil
}
