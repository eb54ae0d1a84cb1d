package httpidem

import (
	"context"
	"net/http"
	"sync"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// Execution is the operation a handler runs under the middleware. A
// handler that knows more than its status code says (a proxy that knows
// nothing reached the upstream) settles the operation's fate itself.
type Execution struct {
	ns    string
	key   string
	lease ledger.Lease
	mu    sync.Mutex
	fate  *contract.Fate
	code  string
	inTx  bool
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
func (e *Execution) OperationID() string { return e.lease.OpID }

// Key is the operation's idempotency key (to forward to an upstream that
// honours it, with its namespace: ledger.UpstreamKey).
func (e *Execution) Key() string { return e.key }

// Namespace is the namespace of the operation's key.
func (e *Execution) Namespace() string { return e.ns }

type namespaceKey struct{}

// WithNamespace names the namespace of the key of the request whose
// context ctx is, instead of its route's: the MCP proxy's, for a key its
// client sent in _meta (ledger.MCPMetaNamespace) rather than one it
// derived from an intent.
func WithNamespace(ctx context.Context, namespace string) context.Context {
	return context.WithValue(ctx, namespaceKey{}, namespace)
}

// Lease is the lease held while the handler runs (for a handler that
// completes the operation in its own transaction).
func (e *Execution) Lease() ledger.Lease { return e.lease }

// Settle decides the operation's fate instead of its status code, with a
// short error code for the history (e.g. "upstream_dial").
func (e *Execution) Settle(f contract.Fate, code string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.fate, e.code = &f, code
}

// Completed tells the middleware that the handler completed the operation
// itself, inside the transaction of its own business write (with the store
// bound to that transaction: Tx(tx).Complete), and committed it. The
// middleware then only checks that the operation is final and sends the
// handler's response. If the
// transaction did not commit, the operation is still executing and the
// middleware records the outcome as usual.
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

func (e *Execution) settled() (contract.Fate, string, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.fate == nil {
		return 0, "", false
	}
	return *e.fate, e.code, true
}
