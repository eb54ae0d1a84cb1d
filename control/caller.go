package control

import (
	"slices"

	"github.com/idemgate/idemgate/approval"
)

// DefaultAdminRole is the role that resolves operations and effects and
// exports the audit log, unless Operator.AdminRole names another.
const DefaultAdminRole = "admin"

// Caller is who acts. The JSON API and the web page act for a principal
// their authentication found, in that principal's tenant; the CLI acts
// for a Local operator, someone who holds the store itself and so every
// tenant's operations.
type Caller struct {
	approval.Principal
	// Local marks an operator at the store (the CLI): no tenant bounds
	// what they see, and they may resolve without holding a role.
	Local bool
}

// Local is the CLI's operator, named for the histories and the audit log.
func Local(name string) Caller {
	return Caller{Principal: approval.Principal{Name: name}, Local: true}
}

// Of is the caller a principal makes.
func Of(p approval.Principal) Caller { return Caller{Principal: p} }

// sees reports whether the caller may see a record of tenant: another
// tenant's is not found, never forbidden, so its existence stays unsaid.
func (c Caller) sees(tenant string) bool { return c.Local || c.Tenant == tenant }

// holds reports whether the caller holds role (a local operator holds
// every role).
func (c Caller) holds(role string) bool { return c.Local || slices.Contains(c.Roles, role) }
