package mcpproxy

import (
	"fmt"
	"net/http"
	"slices"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
)

// admitted lets a request to a server's endpoint through only for a
// principal the server is open to: of one of its tenants, with one of its
// roles (each list, when set). Anyone else is refused with 403 before
// any session is opened; nothing is reserved or sent. A request without
// a principal goes on, to be refused as unauthenticated. An admitted
// principal's isolated upstream is started then, if it is not up: its
// first call does not wait for a process to start.
func (ps *proxied) admitted(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pr, ok := ps.p.opts.Caller(r)
		if ok {
			if msg := ps.refusedTo(pr); msg != "" {
				contract.NewProblem(contract.CodeForbidden, msg).Write(w)
				return
			}
			if key := ps.isolationKey(pr); key != "" {
				ps.pool.warm(key)
			}
		}
		next.ServeHTTP(w, r)
	})
}

// refusedTo says why the server is not open to pr ("" when it is).
func (ps *proxied) refusedTo(pr approval.Principal) string {
	switch {
	case len(ps.cfg.Tenants) > 0 && !slices.Contains(ps.cfg.Tenants, pr.Tenant):
		return "the MCP server " + ps.cfg.Name + " is not open to this tenant"
	case !hasOneOf(pr, ps.cfg.Roles):
		return "the MCP server " + ps.cfg.Name + " needs one of the roles " + fmt.Sprint(ps.cfg.Roles)
	}
	return ""
}

// toolRefused is the refusal of a call to a tool whose roles pr has none
// of: nothing reserved, nothing sent (nil when pr may call it).
func (ps *proxied) toolRefused(tool string, pr approval.Principal) string {
	roles := ps.cfg.Tools[tool].Roles
	if hasOneOf(pr, roles) {
		return ""
	}
	return "the tool " + tool + " needs one of the roles " + fmt.Sprint(roles) + "; nothing was sent"
}

// hasOneOf reports whether pr has one of roles, or roles is empty.
func hasOneOf(pr approval.Principal, roles []string) bool {
	return len(roles) == 0 || slices.ContainsFunc(roles, func(r string) bool { return slices.Contains(pr.Roles, r) })
}
