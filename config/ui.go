package config

import (
	"slices"
	"time"
)

// UIPrefix is where the web page is served.
const UIPrefix = "/ui/"

// UI tunes the web page (docs/design.md, "The web page").
type UI struct {
	// SecureCookies marks the session cookie Secure: set it when a proxy
	// in front serves the gateway over TLS (it serves plain HTTP itself).
	SecureCookies bool `yaml:"secure_cookies"`
	// SessionTTL and SessionIdle bound a session (8h from sign-in, 30m
	// unused).
	SessionTTL  time.Duration `yaml:"session_ttl"`
	SessionIdle time.Duration `yaml:"session_idle"`
	// TrustedOrigins are origins whose form posts are accepted besides the
	// page's own: for a proxy that rewrites the Host header.
	TrustedOrigins []string `yaml:"trusted_origins"`
	// MaxSessions bounds the sessions held in memory (10,000),
	// MaxSessionsPerTenant one tenant's share of them (a quarter of
	// MaxSessions), MaxSessionsPerPrincipal one principal's (20): one
	// tenant's principals, however many its identity provider signs in,
	// never take every place from the others. 0 is the default.
	MaxSessions             int `yaml:"max_sessions"`
	MaxSessionsPerTenant    int `yaml:"max_sessions_per_tenant"`
	MaxSessionsPerPrincipal int `yaml:"max_sessions_per_principal"`
}

// checkUI refuses a negative bound on the sessions.
func (c *Config) checkUI() error {
	u := c.UI
	if u.MaxSessions < 0 || u.MaxSessionsPerTenant < 0 || u.MaxSessionsPerPrincipal < 0 {
		return c.errorf(c.lines["ui"], "ui: max_sessions, max_sessions_per_tenant and max_sessions_per_principal "+
			"must be positive (0: the default)")
	}
	return nil
}

// ApproverRoles are the roles that see the web page's inbox: every role
// a route's policy lets decide (each approval still checks its own); nil
// when no route asks for approvals (the page's default).
func (c *Config) ApproverRoles() []string {
	var roles []string
	for _, r := range c.Routes {
		if r.policy == nil {
			continue
		}
		for _, role := range r.policy.Approvers() {
			if !slices.Contains(roles, role) {
				roles = append(roles, role)
			}
		}
	}
	return roles
}
