package tracing

import (
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/keyed"
)

// Observer names each keyed request's span by its route (the
// conventions' "METHOD /route", and http.route) and adds its tenant, and
// the state of an operation replayed from memory, which no ledger step
// read. nil when tracing is off.
func (t *Tracing) Observer() keyed.Observer {
	if t == nil {
		return nil
	}
	return observer{}
}

type observer struct{}

// Request implements keyed.Observer.
func (observer) Request(o keyed.Observation) {
	if o.Context == nil {
		return
	}
	span, ok := o.Context.Value(requestSpan{}).(trace.Span)
	if !ok {
		return
	}
	span.SetName(o.Route)
	if o.State == "" { // one SetAttributes call: each takes the span's lock and may grow its slice
		span.SetAttributes(AttrRoute.String(routeOf(o.Route)), AttrTenant.String(o.Tenant))
		return
	}
	span.SetAttributes(AttrRoute.String(routeOf(o.Route)), AttrTenant.String(o.Tenant), AttrState.String(string(o.State)))
}

// Upstream implements keyed.Observer: the client span says it.
func (observer) Upstream(string, int, time.Duration) {}

// Failure implements keyed.Observer: the step's span says it.
func (observer) Failure(string) {}

// Observers tells each of os (nil ones left out) what happened; nil when
// none is left.
func Observers(os ...keyed.Observer) keyed.Observer {
	var all fanout
	for _, o := range os {
		if o != nil {
			all = append(all, o)
		}
	}
	switch len(all) {
	case 0:
		return nil
	case 1:
		return all[0]
	}
	return all
}

type fanout []keyed.Observer

// Request implements keyed.Observer.
func (f fanout) Request(o keyed.Observation) {
	for _, x := range f {
		x.Request(o)
	}
}

// Upstream implements keyed.Observer.
func (f fanout) Upstream(route string, status int, d time.Duration) {
	for _, x := range f {
		x.Upstream(route, status, d)
	}
}

// Failure implements keyed.Observer.
func (f fanout) Failure(kind string) {
	for _, x := range f {
		x.Failure(kind)
	}
}

// Routes implements keyed.RouteObserver for those that are one.
func (f fanout) Routes(names []string) {
	for _, x := range f {
		if ro, ok := x.(keyed.RouteObserver); ok {
			ro.Routes(names)
		}
	}
}
