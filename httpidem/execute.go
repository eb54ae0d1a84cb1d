package httpidem

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// execute runs the handler for an operation this request owns, records its
// outcome, and only then answers: a client never sees an answer that is not
// stored, so its retry gets the same bytes. It reports whether the
// operation is still live (not final) after it.
func (m *Middleware) execute(w http.ResponseWriter, r *http.Request, req *request, lease ledger.Lease,
	next http.Handler) (live bool) {
	// The outcome is recorded even if the client has gone (its retry must
	// find it), within RecordDeadline of the handler's end, however long
	// the handler ran.
	detached := context.WithoutCancel(r.Context())
	defer m.waiters.signal(lease.OpID)
	hb := m.heartbeat(detached, lease, req.route.Lease)
	defer hb.stop()
	c := newCapture(w, m.opts.MaxResponse)
	c.Header().Set(contract.HeaderOperation, lease.OpID)
	exec := &Execution{ns: req.namespace, key: req.key, lease: lease}
	r = r.WithContext(withExecution(r.Context(), exec))
	defer func() {
		if p := recover(); p != nil {
			// The handler may have done anything before it panicked.
			m.leave(detached, hb.stop(), "handler_panic", "the handler panicked", true)
			panic(p)
		}
	}()
	req.executed = true
	began := time.Now()
	next.ServeHTTP(c, r)
	if m.opts.Observer != nil {
		m.opts.Observer.Upstream(req.route.name, c.status, time.Since(began))
	}
	lease = hb.stop()
	ctx, cancel := context.WithTimeout(detached, m.opts.RecordDeadline)
	defer cancel()
	if c.streamed {
		m.leave(ctx, lease, "response_not_captured", "the response was too large or flushed, and cannot be replayed", true)
		return true
	}
	if exec.completedInTx() {
		if op, err := m.opts.Store.Get(ctx, lease.OpID); err == nil && op.State.Final() {
			m.cache.put(op)
			m.recorded(op)
			c.flush()
			return false
		}
	}
	return m.finish(ctx, c, req, exec, lease, hb.away.Load())
}

// recordTimeout bounds a reservation or an acquisition.
const recordTimeout = 30 * time.Second

// finish records the outcome the handler's status means, then answers. A
// store that is briefly unavailable is retried while the answer is held;
// only once the recording deadline has passed does the client get an
// answer the store does not have (the effect happened either way). A
// completion refused because another step moved the operation meanwhile
// answers as the operation stands: the client hears what its retries
// will. It reports whether the operation is still live after it.
func (m *Middleware) finish(ctx context.Context, c *capture, req *request, exec *Execution, lease ledger.Lease,
	away bool) (live bool) {
	resp := c.response()
	code := "http_" + strconv.Itoa(resp.Status)
	fate := req.route.Classify(resp.Status)
	if f, settledCode, ok := exec.settled(); ok {
		fate, code = f, settledCode
	}
	ref := req.route.resultRef.Of(resp.Status, c.header, resp.Body)
	done, err := m.record(ctx, req.route, lease, away, m.outcomeStep(fate, code, resp, ref))
	switch {
	case err == nil:
		if done != nil {
			m.cache.put(done)
			m.recorded(done)
		}
		c.flush()
		return done == nil || !done.State.Final()
	case errors.Is(err, ledger.ErrUnavailable):
		// Past the deadline: the effect happened and this client deserves
		// its answer; the operation stays executing, and its lease will
		// make it unknown.
		m.unrecorded(ctx, req, lease.OpID, resp, ref, err, "answered to the client, not recorded: the store failed")
		c.flush()
		return true
	}
	return m.overtaken(ctx, c, req, fate, resp, ref, lease.OpID, err)
}

// overtaken answers for an operation whose owner's step was refused
// because another step moved it first (an expiry, an operator's
// resolution, a re-send): as it stands, what a retry would hear. An
// expiry that said what this owner would have (unknown) leaves the
// owner's own answer standing; any other answer is not the store's, and
// is logged as unrecorded.
func (m *Middleware) overtaken(ctx context.Context, c *capture, req *request, fate contract.Fate, resp *ledger.Response,
	ref, opID string, err error) (live bool) {
	op, gerr := m.opts.Store.Get(ctx, opID)
	if gerr == nil && op.State == ledger.Unknown && fate == contract.FateUnknown {
		c.flush()
		return true
	}
	m.unrecorded(ctx, req, opID, resp, ref, err, "not recorded: another step moved the operation; "+
		"the client was answered as it stands")
	return m.asItStands(ctx, c.w, op, gerr)
}

// outcomeStep is the owner step that records fate: a completion (which
// may settle the operation after a lapse the store's absence caused),
// a release, or a move to unknown.
func (m *Middleware) outcomeStep(fate contract.Fate, code string, resp *ledger.Response,
	ref string) func(context.Context, ledger.Lease, bool) (*ledger.Operation, error) {
	return func(ctx context.Context, l ledger.Lease, away bool) (*ledger.Operation, error) {
		switch fate {
		case contract.FateSucceeded:
			return m.opts.Store.Complete(ctx, l, ledger.Outcome{State: ledger.Succeeded, Response: resp, Reason: code,
				ResultRef: ref, AfterLapse: away})
		case contract.FateFailed:
			return m.opts.Store.Complete(ctx, l, ledger.Outcome{State: ledger.Failed, Response: resp,
				Reason: code, ErrorCode: code, AfterLapse: away})
		case contract.FateReleased:
			_, err := m.opts.Store.Release(ctx, l, ledger.Note{Reason: "not applied: " + code, ErrorCode: code})
			return nil, err
		}
		_, err := m.opts.Store.MarkUnknown(ctx, l, ledger.Note{Reason: "handler answered " + code, ErrorCode: code})
		return nil, err
	}
}

// unrecorded logs, and tells the audit log, of an upstream answer the
// store does not hold.
func (m *Middleware) unrecorded(ctx context.Context, req *request, opID string, resp *ledger.Response, ref string,
	err error, reason string) {
	m.log(ctx, "answer_unrecorded", opID, err)
	m.noteUnrecorded(req, opID, resp, ref, reason)
}

// asItStands answers for op as read (err: it could not be): its stored
// answer once final, else the problem its state means, as a retry would
// hear. It reports whether the operation is still live.
func (m *Middleware) asItStands(ctx context.Context, w http.ResponseWriter, op *ledger.Operation, err error) (live bool) {
	switch {
	case err != nil:
		m.problem(w, contract.ProblemFor(err), nil)
		return true
	case op.State.Final():
		m.cache.put(op)
		m.replay(ctx, w, op)
		return false
	case op.State == ledger.Unknown:
		m.problem(w, contract.NewProblem(contract.CodeOutcomeUnknown, "the operation's lease lapsed before this "+
			"attempt's outcome could be recorded: its outcome is unknown, and it will not be re-sent; check the status "+
			"resource").WithStatus(http.StatusBadGateway), op)
	default:
		p := contract.NewProblem(contract.CodeInProgress, "another attempt holds this operation now; retry with the same key")
		p.RetryAfter = 1
		m.problem(w, p, op)
	}
	return true
}

// record runs an owner step, and while the store is unavailable runs it
// again with backoff, its lease extended meanwhile, until ctx's deadline.
// An owner step is safe to repeat: one that committed but lost its reply
// is recognised as done. Once the store has been away (away: during the
// handler), the step may settle an operation whose lease lapsed meanwhile,
// if nobody has moved it since: the sweep of any instance may make it
// unknown the moment the store is back, before this owner's next try.
func (m *Middleware) record(ctx context.Context, rt *route, lease ledger.Lease, away bool,
	step func(context.Context, ledger.Lease, bool) (*ledger.Operation, error)) (*ledger.Operation, error) {
	op, err := step(ctx, lease, away)
	if !errors.Is(err, ledger.ErrUnavailable) {
		return op, err
	}
	hb := m.heartbeat(ctx, lease, rt.Lease)
	defer hb.stop()
	for wait := 20 * time.Millisecond; errors.Is(err, ledger.ErrUnavailable); wait = min(wait*2, time.Second) {
		m.log(ctx, "record outcome: store unavailable, retrying", lease.OpID, err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait/2 + rand.N(wait/2+1)):
		}
		op, err = step(ctx, hb.current(), true)
	}
	return op, err
}

// leave marks the operation unknown (or releases it) when no outcome can be
// recorded.
func (m *Middleware) leave(ctx context.Context, lease ledger.Lease, code, reason string, unknown bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opts.RecordDeadline)
	defer cancel()
	var err error
	if unknown {
		_, err = m.opts.Store.MarkUnknown(ctx, lease, ledger.Note{Reason: reason, ErrorCode: code})
	} else {
		_, err = m.opts.Store.Release(ctx, lease, ledger.Note{Reason: reason, ErrorCode: code})
	}
	if err != nil {
		m.log(ctx, "record "+code, lease.OpID, err)
	}
}

// recorded tells Recorded of a final operation.
func (m *Middleware) recorded(op *ledger.Operation) {
	if m.opts.Recorded != nil && op != nil && op.State.Final() {
		m.opts.Recorded(op)
	}
}
