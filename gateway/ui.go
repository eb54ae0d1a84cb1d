package gateway

import (
	"net/http"
	"slices"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/webui"
)

// UIPrefix is where the web page is served.
const UIPrefix = "/ui/"

// UIConfig tunes the web page (docs/design.md, "The web page").
type UIConfig struct {
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
}

// ui builds the web page: sign-in by a principal's token, and every
// decision and resolution through the store, as the control API makes
// them; the requests waiting on the operation are woken, and the metrics
// count a resolution.
func (g *Gateway) ui(m *httpidem.Middleware) (http.Handler, error) {
	c := g.cfg.UI
	return webui.New(webui.Options{Store: g.store, Prefix: UIPrefix, Logger: g.log, ApproverRoles: g.approverRoles(),
		MaxResponse: int64(g.cfg.MaxResponse),
		Secure:      c.SecureCookies, SessionTTL: c.SessionTTL, SessionIdle: c.SessionIdle, TrustedOrigins: c.TrustedOrigins,
		Authenticate: func(token string) (approval.Principal, bool) {
			p := g.principalByToken(token)
			if p == nil {
				return approval.Principal{}, false
			}
			return approval.Principal{Name: p.Name, Tenant: p.Tenant, Roles: p.Roles}, true
		},
		Series:  dashboard{g.metrics.History()},
		Decided: func(a *ledger.Approval) { m.Changed(a.OpID) },
		Resolved: func(before, after *ledger.Operation, duplicate bool) {
			m.Changed(after.ID)
			g.metrics.Resolved(after.Tenant, after.State, after.UpdatedAt.Sub(before.UpdatedAt), duplicate)
		},
	})
}

// approverRoles are the roles that see the inbox: every role a route's
// policy lets decide (each approval still checks its own).
func (g *Gateway) approverRoles() []string {
	var roles []string
	for _, r := range g.cfg.Routes {
		if r.policy == nil {
			continue
		}
		for _, role := range r.policy.Approvers() {
			if !slices.Contains(roles, role) {
				roles = append(roles, role)
			}
		}
	}
	if len(roles) == 0 {
		return nil // the page's default
	}
	return roles
}

// dashboard is the metrics history as the web page charts it.
type dashboard struct{ h *metrics.History }

// Indicators implements webui.Series.
func (d dashboard) Indicators(tenant string, since time.Duration) []webui.Indicator {
	samples := d.h.Since(tenant, since, time.Now())
	out := make([]webui.Indicator, len(metrics.Indicators))
	for i, ind := range metrics.Indicators {
		unit := "per 10 s"
		if ind.Gauge {
			unit = ""
		} else if i == metrics.ReconcileIndicator {
			unit = "seconds"
		}
		out[i] = webui.Indicator{Name: ind.Metric, Title: ind.Name, Help: ind.Help, Unit: unit}
		for _, s := range samples {
			out[i].Points = append(out[i].Points, webui.Point{At: s.At, Value: s.Values[i]})
		}
	}
	return out
}
