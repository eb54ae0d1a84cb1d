package httpidem

import (
	"context"
	"net/http"
	"sync"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// Execution is the operation a handler runs under the middleware. A
// handler that knows more than its status code says (a proxy that knows
// whether anything reached the upstream) says so.
type Execution struct {
	run  *keyed.Run
	mu   sync.Mutex
	fate *contract.Fate
	code string
	inTx bool
	err  error
}

type executionKey struct{}

// Current returns the execution of r, or nil outside the middleware.
func Current(r *http.Request) *Execution {
	e, _ := r.Context().Value(executionKey{}).(*Execution)
	return e
}

func withExecution(ctx context.Context, e *Execution) context.Context {
	return context.WithValue(ctx, executionKey{}, e)
}

// OperationID is the id of the operation being run.
func (e *Execution) OperationID() string { return e.run.OperationID() }

// Key is the operation's idempotency key.
func (e *Execution) Key() string { return e.run.Key() }

// UpstreamKey is the key to forward to an upstream that honours keys: in
// the name of the operation's tenant and namespace (ledger.UpstreamKey).
func (e *Execution) UpstreamKey() string {
	op := e.run.Operation()
	return ledger.UpstreamKey(op.Tenant, op.Namespace, op.Key)
}

// Lease is the lease held while the handler runs (for a handler that
// completes the operation in its own transaction).
func (e *Execution) Lease() ledger.Lease { return e.run.Lease() }

// Settle decides the operation's fate instead of its status code, with a
// short error code for the history.
func (e *Execution) Settle(f contract.Fate, code string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fate, e.code = &f, code
}

// Failed tells the middleware that the handler's call got no answer,
// with err made by contract.NotSent (nothing left: the operation is
// released) or contract.NoAnswer (something may have: unknown). The handler
// writes nothing then: the executor's rule decides, and its problem is
// the answer.
func (e *Execution) Failed(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.err = err
}

// Completed tells the middleware that the handler completed the operation
// itself, inside the transaction of its own business write (with the store
// bound to that transaction: Tx(tx).Complete), and committed it. The
// middleware then only checks that the operation is final and sends the
// handler's response. If the transaction did not commit, the operation is
// still executing and the middleware records the outcome as usual.
func (e *Execution) Completed() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.inTx = true
}

func (e *Execution) completedInTx() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inTx
}

func (e *Execution) failure() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.err
}

func (e *Execution) settled() (contract.Fate, string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fate == nil {
		return 0, "", false
	}
	return *e.fate, e.code, true
}
