package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// Store traces each ledger step of the keyed write path: a span per call
// ("ledger.Reserve", …) with the operation's id, state and tenant once
// known, and its failure as the problem code it maps to (never an error's
// text, which may quote what a client sent). The request's span takes the
// operation's state, the last step's last.
func (t *Tracing) Store(s keyed.Store) keyed.Store {
	if t == nil {
		return s
	}
	return &store{s: s, t: t}
}

type store struct {
	s keyed.Store
	t *Tracing
}

var _ keyed.Store = (*store)(nil)

// internal is every step span's kind, built once: a start option is an
// allocation per span otherwise.
var internal = trace.WithSpanKind(trace.SpanKindInternal)

// step runs one ledger step in its span. name is the span's whole name
// ("ledger.Reserve"), a constant, so that naming it allocates nothing.
func step[T any](ctx context.Context, s *store, name string, call func(context.Context) (T, error),
	op func(T) *ledger.Operation, attrs ...attribute.KeyValue) (T, error) {
	ctx, span := s.t.tracer.Start(ctx, name, internal, trace.WithAttributes(attrs...))
	defer span.End()
	v, err := call(ctx)
	if err != nil {
		span.SetStatus(codes.Error, contract.ProblemFor(err).Code)
		return v, err
	}
	if o := op(v); o != nil {
		span.SetAttributes(AttrOperation.String(o.ID), AttrState.String(string(o.State)), AttrTenant.String(o.Tenant))
		if req, ok := ctx.Value(requestSpan{}).(trace.Span); ok {
			req.SetAttributes(AttrState.String(string(o.State))) // the last step's is the request's
		}
	}
	return v, nil
}

// routeOf is the path template of a route ("POST /v1/x/{id}": /v1/x/{id}).
func routeOf(route string) string {
	for i := 0; i < len(route); i++ {
		if route[i] == ' ' {
			return route[i+1:]
		}
	}
	return route
}

func reserved(r ledger.Reservation) *ledger.Operation { return r.Op }
func itself(o *ledger.Operation) *ledger.Operation    { return o }
func none[T any](T) *ledger.Operation                 { return nil }

func (s *store) Reserve(ctx context.Context, p ledger.ReserveParams) (ledger.Reservation, error) {
	return step(ctx, s, "ledger.Reserve", func(ctx context.Context) (ledger.Reservation, error) { return s.s.Reserve(ctx, p) },
		reserved, AttrTenant.String(p.Tenant))
}

func (s *store) Acquire(ctx context.Context, p ledger.AcquireParams) (ledger.Reservation, error) {
	return step(ctx, s, "ledger.Acquire", func(ctx context.Context) (ledger.Reservation, error) { return s.s.Acquire(ctx, p) },
		reserved, AttrOperation.String(p.ID))
}

func (s *store) Heartbeat(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error) {
	return step(ctx, s, "ledger.Heartbeat", func(ctx context.Context) (ledger.Lease, error) { return s.s.Heartbeat(ctx, l, d) },
		none[ledger.Lease], AttrOperation.String(l.OpID))
}

func (s *store) Complete(ctx context.Context, l ledger.Lease, o ledger.Outcome) (*ledger.Operation, error) {
	return step(ctx, s, "ledger.Complete", func(ctx context.Context) (*ledger.Operation, error) { return s.s.Complete(ctx, l, o) },
		itself, AttrOperation.String(l.OpID))
}

func (s *store) Release(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error) {
	return step(ctx, s, "ledger.Release", func(ctx context.Context) (*ledger.Operation, error) { return s.s.Release(ctx, l, n) },
		itself, AttrOperation.String(l.OpID))
}

func (s *store) MarkUnknown(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error) {
	return step(ctx, s, "ledger.MarkUnknown", func(ctx context.Context) (*ledger.Operation, error) {
		return s.s.MarkUnknown(ctx, l, n)
	}, itself, AttrOperation.String(l.OpID))
}

func (s *store) ReopenApproval(ctx context.Context, p ledger.ReopenParams) (*ledger.Operation, error) {
	return step(ctx, s, "ledger.ReopenApproval", func(ctx context.Context) (*ledger.Operation, error) {
		return s.s.ReopenApproval(ctx, p)
	}, itself, AttrOperation.String(p.OpID))
}

func (s *store) Get(ctx context.Context, id string) (*ledger.Operation, error) {
	return step(ctx, s, "ledger.Get", func(ctx context.Context) (*ledger.Operation, error) { return s.s.Get(ctx, id) },
		itself, AttrOperation.String(id))
}

// GetByKey's span names the tenant, never the key.
func (s *store) GetByKey(ctx context.Context, k ledger.OpKey) (*ledger.Operation, error) {
	return step(ctx, s, "ledger.GetByKey", func(ctx context.Context) (*ledger.Operation, error) {
		return s.s.GetByKey(ctx, k)
	}, itself, AttrTenant.String(k.Tenant))
}

func (s *store) GetApproval(ctx context.Context, id string) (*ledger.Approval, error) {
	return step(ctx, s, "ledger.GetApproval", func(ctx context.Context) (*ledger.Approval, error) {
		return s.s.GetApproval(ctx, id)
	}, none[*ledger.Approval])
}

func (s *store) History(ctx context.Context, id string) ([]ledger.Event, error) {
	return step(ctx, s, "ledger.History", func(ctx context.Context) ([]ledger.Event, error) { return s.s.History(ctx, id) },
		none[[]ledger.Event], AttrOperation.String(id))
}
