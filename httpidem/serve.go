package httpidem

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, rt *route, next http.Handler) {
	req, p := m.readRequest(r, rt)
	if p != nil {
		p.Write(w)
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(req.body))
	if req.key == "" {
		next.ServeHTTP(w, r)
		return
	}
	if p := m.targetBound(req); p != nil {
		p.Write(w)
		return
	}
	if m.opts.Observer != nil {
		ow := &observed{ResponseWriter: w}
		defer m.observe(req, ow, time.Now())
		w = ow
	}
	if op := m.cache.get(req.opKey()); op != nil {
		m.cached(r.Context(), w, req, op)
		return
	}
	if m.retried(w, r, req, next) {
		return
	}
	apr, p := m.approvalFor(r, req)
	if p == nil {
		p = m.commandBound(apr)
	}
	if p != nil {
		p.Write(w)
		return
	}
	settle, p := m.admit(r.Context(), req, apr)
	if p != nil {
		p.Write(w)
		return
	}
	live := false
	defer func() { settle(req.created, live) }()
	// Detached: a client that leaves must not cut a reservation between its
	// commit and its reply, leaving an operation nobody owns.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), recordTimeout)
	res, err := m.reserve(ctx, req, apr)
	cancel()
	req.created = err == nil && res.Created
	switch {
	case err != nil:
		m.reserveFailed(ctx, err, res.Op)
		m.noteRefusal(req, err, res.Op)
		m.problem(w, contract.ProblemFor(err), res.Op)
	case res.Owned():
		live = m.run(w, r, req, res, next)
	case res.Created: // prepared, waiting for its approval
		live = true
		if apr != nil {
			m.summaries.put(apr.ID, apr.Summary)
		}
		m.approved(w, r, req, res.Op, next)
	case res.Duplicate:
		m.note(req, audit.Duplicate, res.Op, "a new key for the business identity of "+res.Op.ID)
		m.duplicate(w, r, req, res.Op, next)
	default:
		m.existing(w, r, req, res.Op, next)
	}
}

// reserveRetry bounds how long a reservation whose reply was lost is
// repeated: long enough for a pool to replace a lost connection.
const reserveRetry = 500 * time.Millisecond

// reserve reserves req's operation. When the store's reply is lost (the
// reservation may have committed) it repeats the very same reservation,
// its id and token chosen here: one that committed is then recognised as
// this request's, instead of being left executing with nobody to run it,
// and turning unknown although nothing was sent. A store that cannot write
// is refused at once.
func (m *Middleware) reserve(ctx context.Context, req *request, apr *ledger.ApprovalRequest) (ledger.Reservation, error) {
	p := m.reserveParams(req)
	if apr != nil {
		p.Lease, p.Approval = 0, apr
	}
	p.ID, p.Token = ledger.NewID(), ledger.NewToken()
	res, err := m.opts.Store.Reserve(ctx, p)
	deadline := time.Now().Add(reserveRetry)
	for wait := 10 * time.Millisecond; errors.Is(err, ledger.ErrReplyLost) && time.Now().Before(deadline); wait *= 2 {
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(wait/2 + rand.N(wait/2+1)):
		}
		res, err = m.opts.Store.Reserve(ctx, p)
	}
	return res, err
}

// admit asks Admit whether req may create an operation (opening apr, if
// set); one refused whose key exists already goes on, since its
// reservation creates nothing.
func (m *Middleware) admit(ctx context.Context, req *request, apr *ledger.ApprovalRequest) (
	settle func(created, live bool), p *contract.Problem) {
	if m.opts.Admit == nil {
		return noSettle, nil
	}
	if settle, p = m.opts.Admit(ctx, req.tenant, req.admission(apr)); p == nil {
		if settle == nil {
			settle = noSettle
		}
		return settle, nil
	}
	if _, err := m.opts.Store.GetByKey(ctx, req.opKey()); err == nil {
		return noSettle, nil
	}
	return nil, p
}

func noSettle(bool, bool) {}
