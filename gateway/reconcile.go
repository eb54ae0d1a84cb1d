package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/internal/resultref"
	"github.com/idemgate/idemgate/reconcile"
)

// checkReconcile compiles a route's probe at start-up: a template that
// does not parse, a probe that writes, or an expression that does not
// type-check is an error naming the route's line.
func (c *Config) checkReconcile(r *RouteConfig) error {
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

// routeProbe is the middleware's hook that renders a route's probe.
func routeProbe(rc *RouteConfig) func(map[string]string, map[string][]string, any) (string, error) {
	if rc.probe == nil {
		return nil
	}
	return rc.probe.Render
}

// Reconciler is the gateway's reconciler: the probes of its routes, sent
// to their upstreams with the gateway's credentials.
func (g *Gateway) Reconciler() *reconcile.Reconciler {
	probes, upstreams, refs := map[string]*reconcile.Probe{}, map[string]*upstreamClient{}, map[string]func(int,
		http.Header, []byte) string{}
	for _, rc := range g.cfg.Routes {
		if rc.probe == nil {
			continue
		}
		route := rc.method + " " + rc.pattern
		probes[route], upstreams[route] = rc.probe, g.clients[rc.Upstream]
		if ref, err := resultref.Compile(rc.ResultRef); err == nil && ref != nil {
			refs[route] = ref
		}
	}
	r := &reconcile.Reconciler{Store: g.store, Probes: probes, Logger: g.log,
		Send: func(ctx context.Context, route, method, target string) (reconcile.Answer, error) {
			return upstreams[route].probe(ctx, method, target, int64(g.cfg.MaxResponse))
		},
		ResultRef: func(route string, a reconcile.Answer) string {
			if ref := refs[route]; ref != nil {
				return ref(a.Status, a.Header, a.Body)
			}
			return ""
		}}
	if g.events != nil {
		r.Audit = func(e audit.Event) { g.events.Record(e) }
	}
	return r
}

// probe sends a probe request to the upstream, with the gateway's
// credentials and no key: a probe reads.
func (uc *upstreamClient) probe(ctx context.Context, method, target string, max int64) (reconcile.Answer, error) {
	in, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return reconcile.Answer{}, fmt.Errorf("probe: %w", err)
	}
	out := in.Clone(ctx)
	(&httputil.ProxyRequest{In: in, Out: out}).SetURL(uc.cfg.target)
	uc.setHeaders(out.Header, "")
	ctx, cancel := context.WithTimeout(ctx, uc.cfg.Timeout)
	defer cancel()
	resp, err := uc.client.Do(out.WithContext(ctx))
	if err != nil {
		return reconcile.Answer{}, fmt.Errorf("upstream %s: %w", uc.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, max+1))
	if err != nil || int64(len(body)) > max {
		return reconcile.Answer{}, fmt.Errorf("upstream %s: the probe's answer was cut or over %d bytes", uc.name, max)
	}
	return reconcile.Answer{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}

// reconcileEvery is how often the reconciler looks for due probes; each
// operation's own pace is its route's `every`.
const reconcileEvery = time.Second

// runReconciler reconciles until ctx ends, when any route declares a probe.
func (g *Gateway) runReconciler(ctx context.Context) {
	r := g.Reconciler()
	if len(r.Probes) == 0 {
		return
	}
	r.Run(ctx, reconcileEvery)
}
