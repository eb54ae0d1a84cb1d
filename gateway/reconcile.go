package gateway

import (
	"context"
	"fmt"
	"github.com/idemgate/idemgate/config"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/resultref"
	"github.com/idemgate/idemgate/reconcile"
)

// routeProbe is the middleware's hook that renders a route's probe.
func routeProbe(rc *config.Route) func(map[string]string, map[string][]string, any) (string, error) {
	if rc.Probe() == nil {
		return nil
	}
	return rc.Probe().Render
}

// NewReconciler is the reconciler of cfg's routes that declare a probe
// (docs/design.md, "Reconciliation"): each probe sent to its route's
// upstream with the gateway's credentials, each verdict recorded in store,
// and each probe's audit event given to record (nil for none). It needs no
// Gateway: `idemgate reconcile --once` builds only this.
func NewReconciler(cfg *config.Config, store reconcile.Store, record func(audit.Event), log *slog.Logger) *reconcile.Reconciler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	probes, upstreams := map[string]*reconcile.Probe{}, map[string]*upstreamClient{}
	refs := map[string]resultref.Reader{}
	for _, rc := range cfg.Routes {
		if rc.Probe() == nil {
			continue
		}
		route := rc.Method() + " " + rc.Pattern()
		probes[route] = rc.Probe()
		upstreams[route] = newUpstreamClient(rc.Upstream, cfg.Upstreams[rc.Upstream], log, nil)
		refs[route], _ = resultref.Compile(rc.ResultRef) // checked when the configuration was loaded
	}
	for _, a := range cfg.Actions {
		if a.Probe() != nil {
			route := contract.ActionRoute(a.Name)
			probes[route] = a.Probe()
			upstreams[route] = newUpstreamClient(a.Upstream, cfg.Upstreams[a.Upstream], log, nil)
		}
	}
	max := int64(cfg.MaxResponse)
	return &reconcile.Reconciler{Store: store, Probes: probes, Logger: log, Audit: record,
		Send: func(ctx context.Context, route, method, target string) (reconcile.Answer, error) {
			return upstreams[route].probe(ctx, method, target, max)
		},
		ResultRef: func(route string, a reconcile.Answer) string { return refs[route].Of(a.Status, a.Header, a.Body) }}
}

// probe sends a probe request to the upstream, with the gateway's
// credentials and no key: a probe reads.
func (uc *upstreamClient) probe(ctx context.Context, method, target string, max int64) (reconcile.Answer, error) {
	in, err := http.NewRequestWithContext(ctx, method, target, nil)
	if err != nil {
		return reconcile.Answer{}, fmt.Errorf("probe: %w", err)
	}
	out := in.Clone(ctx)
	(&httputil.ProxyRequest{In: in, Out: out}).SetURL(uc.cfg.Target())
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
