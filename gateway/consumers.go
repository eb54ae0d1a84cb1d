package gateway

import (
	"bytes"
	"context"
	"net/http"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/inbox"
	"github.com/idemgate/idemgate/ledger"
)

// consumerRoute is the middleware's route of a consumer's deliveries: a
// keyed write whose operation's route (and metrics label) is the
// consumer's, fingerprinted by the message's body.
func consumerRoute(k *ConsumerConfig, uc *upstreamClient) httpidem.Route {
	required := true
	return httpidem.Route{Method: k.Deliver.Method, Pattern: consumerPattern(k.Name), Name: k.Route(),
		RequireKey: &required, Lease: k.Lease, Retention: k.Retention, Resend: uc.cfg.HonoursKey,
		Kind: ledger.KindConsumer, Namespace: ledger.ConsumerNamespace(k.Name)}
}

// consumerHandlers are each consumer's keyed path: the tenant's rate, the
// middleware, then the upstream's forwarding to the consumer's path.
func (g *Gateway) consumerHandlers(m *httpidem.Middleware, clients map[string]*upstreamClient) map[string]http.Handler {
	out := map[string]http.Handler{}
	for _, k := range g.cfg.Consumers {
		wp := writeProxy{uc: clients[k.Deliver.Upstream], maxResponse: int64(g.cfg.MaxResponse), hold: g.cfg.HoldBeforeForward}
		path := k.Deliver.Path
		forward := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if s, ok := r.Context().Value(deliveryKey{}).(*deliveryState); ok {
				s.ran = true
				if exec := httpidem.Current(r); exec != nil {
					s.opID = exec.OperationID()
					g.running.Store(s.opID, s) // recorded hears of its final state
				}
			}
			r.URL.Path, r.URL.RawPath = path, ""
			wp.ServeHTTP(w, r)
		})
		out[k.Name] = g.limited(m.Handler(forward))
	}
	return out
}

// Deliverer is consumer name's way through the data plane, or nil when
// no consumer has that name.
func (g *Gateway) Deliverer(name string) inbox.Deliverer {
	h := g.consumers[name]
	if h == nil {
		return nil
	}
	for _, k := range g.cfg.Consumers {
		if k.Name == name {
			p := &Principal{Name: k.Route(), Tenant: k.Tenant}
			return &deliverer{g: g, h: h, principal: p, method: k.Deliver.Method, path: consumerPattern(name)}
		}
	}
	return nil
}

// deliverer runs a message's operation as an in-process keyed request.
type deliverer struct {
	g            *Gateway
	h            http.Handler
	principal    *Principal
	method, path string
}

type deliveryKey struct{}

// deliveryState is what the forwarding tells the deliverer: that it ran,
// the operation it ran, and (from Gateway.recorded) the final state its
// outcome was recorded in.
type deliveryState struct {
	ran   bool
	opID  string
	state ledger.State
}

// settled notes a final operation a consumer's delivery ran.
func (g *Gateway) settled(op *ledger.Operation) {
	if v, ok := g.running.Load(op.ID); ok {
		v.(*deliveryState).state = op.State
	}
}

// Deliver sends d through the keyed path and reads how it ended. When
// the upstream was called, the operation's state is the one its outcome
// was recorded in (the answer alone cannot say whether it was recorded,
// and an upstream's headers are its own), read from the store unless the
// recording was final; otherwise the middleware's answer says it: a
// replay, or a problem.
func (d *deliverer) Deliver(ctx context.Context, dl inbox.Delivery) (inbox.Outcome, error) {
	st := &deliveryState{}
	ctx = context.WithValue(context.WithValue(ctx, principalKey{}, d.principal), deliveryKey{}, st)
	req, err := http.NewRequestWithContext(ctx, d.method, d.path, bytes.NewReader(dl.Body))
	if err != nil {
		return inbox.Outcome{}, err
	}
	req.RequestURI = ""
	req.Header.Set(contract.HeaderKey, dl.Key)
	ct := dl.ContentType
	if ct == "" {
		ct = "application/json"
	}
	req.Header.Set("Content-Type", ct)
	rec := &answer{header: http.Header{}}
	d.h.ServeHTTP(rec, req)
	d.g.running.Delete(st.opID)
	out := inbox.Outcome{OpID: rec.header.Get(contract.HeaderOperation), Code: rec.code,
		Replayed: rec.header.Get(contract.HeaderReplayed) == "true",
		State:    ledger.State(rec.header.Get(contract.HeaderState))}
	switch {
	case !st.ran || out.OpID == "":
	case st.state != "": // recorded final: no read needed
		out.State = st.state
	default: // recorded unknown or released, or not recorded: the store says
		op, err := d.g.store.Get(context.WithoutCancel(ctx), out.OpID)
		if err != nil {
			return out, err
		}
		out.State = op.State
	}
	return out, nil
}

// answer keeps what the keyed path answered: its headers and problem
// code (contract.CodeNoter); the body is the upstream's, and stored.
type answer struct {
	header http.Header
	status int
	code   string
}

func (a *answer) Header() http.Header         { return a.header }
func (a *answer) WriteHeader(status int)      { a.status = status }
func (a *answer) Write(b []byte) (int, error) { return len(b), nil }
func (a *answer) NoteCode(code string)        { a.code = code }
