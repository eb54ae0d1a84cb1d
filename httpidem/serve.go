package httpidem

import (
	"bytes"
	"context"
	"io"
	"net/http"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/keyed"
)

// serve is a keyed request's way: read and checked here (a refusal
// changes nothing), run by the executor, answered here.
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
	cmd := m.command(r, req)
	var c *capture
	var effect keyed.Effect
	if rt.Action == "" {
		c = newCapture(w, m.opts.MaxResponse)
		effect = m.effect(r, rt, c, next)
	}
	res, err := m.x.Execute(r.Context(), cmd, effect)
	if err != nil {
		contract.ProblemFor(err).Write(w)
		return
	}
	m.answer(r.Context(), w, res, c)
}

// command is req as the executor takes it.
func (m *Middleware) command(r *http.Request, req *request) *keyed.Command {
	rt := req.route
	cmd := &keyed.Command{Policy: &rt.policy, Tenant: req.tenant, Namespace: rt.namespace, Key: req.key,
		Fingerprint: req.fingerprint, BusinessKey: req.businessKey(), ConcurrencyKey: keyed.KeyValue(req.command, rt.concurrent),
		Principal: req.principal, Run: req.run, Trace: req.trace, Target: req.target, Probe: m.probeOf(req),
		Rules: rt.rules, Refingerprint: func(rules string) (string, error) { return m.refingerprint(r, req, rules) }}
	cmd.Principal.Name = req.who
	if wait, ok := preferWait(r, m.opts.MaxWait); ok {
		cmd.Wait = wait
	}
	if rt.Approval != nil {
		cmd.Approval = m.approvalInput(r, req)
	}
	return cmd
}

// effect runs the handler for an operation the request owns, its answer
// held (capture) until the outcome is recorded: a client never hears an
// answer that is not stored, so its retry gets the same bytes.
func (m *Middleware) effect(r *http.Request, rt *route, c *capture, next http.Handler) keyed.Effect {
	return func(ctx context.Context, run *keyed.Run) (keyed.Outcome, error) {
		approved, err := run.Approved(ctx)
		if err != nil {
			return keyed.Outcome{}, contract.NotSent("approval", err)
		}
		exec := &Execution{run: run}
		hr := asApproved(r, rt, approved).WithContext(withExecution(r.Context(), exec))
		c.Header().Set(contract.HeaderOperation, run.OperationID())
		next.ServeHTTP(c, hr)
		if err := exec.failure(); err != nil {
			return keyed.Outcome{}, err
		}
		return m.outcome(rt, c, exec), nil
	}
}

// outcome is what the handler's answer means: by its status (the route's
// Classify), unless the handler settled it.
func (m *Middleware) outcome(rt *route, c *capture, exec *Execution) keyed.Outcome {
	resp := c.response()
	out := keyed.Outcome{Fate: rt.Classify(resp.Status), Answer: resp, InTx: exec.completedInTx(),
		ResultRef: rt.resultRef.Of(resp.Status, c.header, resp.Body)}
	if f, code, ok := exec.settled(); ok {
		out.Fate, out.Code = f, code
	}
	if c.streamed {
		out.Streamed, out.Size, out.SHA256 = true, c.size, c.digest()
	}
	return out
}
