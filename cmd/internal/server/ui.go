package server

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/metrics"
	"github.com/idemgate/idemgate/webui"
)

// UIPrefix is where the web page is served.
const UIPrefix = "/ui/"

// ui builds the web page: sign-in by a principal's token, and every
// decision and resolution through the control plane's Operator, as the
// control API makes them.
func (s *Server) ui(sn *snapshot) (*webui.UI, error) {
	c := sn.cfg.UI
	amounts, err := amountsOf(sn.cfg)
	if err != nil {
		return nil, err
	}
	return webui.New(webui.Options{Store: s.store, Operator: sn.op, Prefix: UIPrefix, Logger: s.log, Amounts: amounts,
		ApproverRoles: sn.cfg.ApproverRoles(), Secure: c.SecureCookies, SessionTTL: c.SessionTTL,
		SessionIdle: c.SessionIdle, TrustedOrigins: c.TrustedOrigins, Series: dashboard{s.metrics.History()},
		MaxSessions: c.MaxSessions, MaxSessionsPerTenant: c.MaxSessionsPerTenant,
		MaxSessionsPerPrincipal: c.MaxSessionsPerPrincipal,
		Failures:                s.limits.Failures(), // one budget per client, shared with the APIs
		Now:                     sn.cfg.Clock,        // nil: time.Now
		Sessions:                s.sessions,          // the server's: a reload ends only the sessions it changed
		Authenticate: func(r *http.Request, token string) (webui.SignIn, bool) {
			p, _ := sn.gw.PrincipalFor(r, token)
			if p == nil {
				return webui.SignIn{}, false
			}
			return webui.SignIn{Principal: approval.Principal{Name: p.Name, Tenant: p.Tenant, Roles: p.Roles},
				Until: p.Expires(), Credential: p.Credential()}, true
		},
	})
}

// amountsOf reads the members that each route's and action's schema marks
// as minor units of a currency (webui.MinorUnitsKeyword), by the route's
// name as its operations record it: the web page formats them.
func amountsOf(cfg *config.Config) (map[string][]webui.Amount, error) {
	out := map[string][]webui.Amount{}
	add := func(route, schema string) error {
		if schema == "" {
			return nil
		}
		data, err := os.ReadFile(schema)
		if err == nil {
			out[route], err = webui.AmountsOf(data)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", route, err)
		}
		return nil
	}
	for _, rc := range cfg.Routes {
		if err := add(strings.TrimSpace(rc.Match), rc.Schema); err != nil {
			return nil, err
		}
	}
	for _, a := range cfg.Actions {
		if err := add(contract.ActionRoute(a.Name), a.Schema); err != nil {
			return nil, err
		}
	}
	return out, nil
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
		for _, sm := range samples {
			out[i].Points = append(out[i].Points, webui.Point{At: sm.At, Value: sm.Values[i]})
		}
	}
	return out
}
