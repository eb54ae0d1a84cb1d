package httpidem

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// replay sends a final operation's stored response, byte for byte, marked
// as a replay.
func (m *Middleware) replay(ctx context.Context, w http.ResponseWriter, op *ledger.Operation) {
	if op.Response == nil {
		m.replayWithoutResponse(ctx, w, op)
		return
	}
	h := w.Header()
	for k, v := range op.Response.Header {
		h[k] = append([]string(nil), v...)
	}
	h.Set(contract.HeaderReplayed, "true")
	h.Set(contract.HeaderOperation, op.ID)
	w.WriteHeader(op.Response.Status)
	_, _ = w.Write(op.Response.Body)
}

// replayWithoutResponse answers for an operation that ended without a stored
// answer: denied, or resolved by an operator who did not know it. The
// latter is the operation's summary with its resolution, so that the agent
// cannot take the body for the upstream's.
func (m *Middleware) replayWithoutResponse(ctx context.Context, w http.ResponseWriter, op *ledger.Operation) {
	if op.State == ledger.Failed && op.LastError == contract.CodeApprovalDenied {
		m.problem(w, contract.NewProblem(contract.CodeApprovalDenied, "the approval for this operation was denied"), op)
		return
	}
	status := http.StatusOK
	if op.State == ledger.Failed {
		status = http.StatusUnprocessableEntity
	}
	body := resolvedBody{Summary: contract.NewSummary(op), Resolution: m.resolution(ctx, op)}
	if m.opts.StatusBase != "" {
		body.StatusURL = m.opts.StatusBase + "/operations/" + op.ID
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set(contract.HeaderReplayed, "true")
	w.Header().Set(contract.HeaderOperation, op.ID)
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}

// resolvedBody is the replay of an operation resolved without the
// upstream's answer.
type resolvedBody struct {
	contract.Summary
	Resolution Resolution `json:"resolution"`
	StatusURL  string     `json:"status_url,omitempty"`
}

// Resolution says who resolved an operation without the upstream's
// answer, when, and their note, as its history records them (the tenant
// reads the same history on the control API). By and Note are empty when
// the history cannot be read.
type Resolution struct {
	Detail string     `json:"detail"`
	By     string     `json:"by,omitempty"`
	Note   string     `json:"note,omitempty"`
	At     *time.Time `json:"at,omitempty"`
}

// resolution reads op's resolution from its history: the last move out
// of unknown, the only way to a final state without an answer.
func (m *Middleware) resolution(ctx context.Context, op *ledger.Operation) Resolution {
	res := Resolution{Detail: "an operator resolved this operation as " + string(op.State) +
		" without the upstream's answer: this body is the gateway's, not the upstream's"}
	history, err := m.opts.Store.History(ctx, op.ID)
	if err != nil {
		m.log(ctx, "history", op.ID, err)
		return res
	}
	for i := len(history) - 1; i >= 0; i-- {
		if e := history[i]; e.From == ledger.Unknown && e.To == op.State {
			at := e.At.UTC()
			res.By, res.Note, res.At = e.Actor, e.Reason, &at
			break
		}
	}
	return res
}

// preferWait reads "Prefer: wait=N" (RFC 7240), capped at max.
func preferWait(r *http.Request, max time.Duration) (time.Duration, bool) {
	for _, v := range r.Header.Values(contract.HeaderPrefer) {
		for _, pref := range strings.Split(v, ",") {
			name, val, ok := strings.Cut(strings.TrimSpace(pref), "=")
			if !ok || !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			secs, err := strconv.Atoi(strings.Trim(strings.TrimSpace(val), `"`))
			if err != nil || secs <= 0 {
				continue
			}
			return min(time.Duration(secs)*time.Second, max), true
		}
	}
	return 0, false
}

// wait waits for an executing operation to leave executing, bounded by d,
// the request, and the lease: once the lease has lapsed (heartbeats extend
// it while the owner works), the operation will not end well, and the
// answer is the state it is in.
func (m *Middleware) wait(ctx context.Context, op *ledger.Operation, d time.Duration) *ledger.Operation {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	done := m.waiters.wait(op.ID)
	defer m.waiters.forget(op.ID, done)
	poll := 10 * time.Millisecond
	for op.State == ledger.Executing && time.Now().Before(op.LeaseUntil.Add(leaseGrace)) {
		select {
		case <-ctx.Done():
			return op
		case <-done: // finished in this process
		case <-time.After(poll): // or in another one
			poll = min(poll*2, 250*time.Millisecond)
		}
		latest, err := m.opts.Store.Get(context.WithoutCancel(ctx), op.ID)
		if err != nil {
			return op
		}
		op = latest
	}
	return op
}

// leaseGrace allows for clock skew between this process and the store
// before a lease counts as lapsed for a waiter.
const leaseGrace = 500 * time.Millisecond

// waiters lets requests waiting for an operation hear at once that this
// process finished it; other processes' completions are found by polling.
type waiters struct {
	mu sync.Mutex
	m  map[string]*waiter
}

type waiter struct {
	ch    chan struct{}
	count int
}

func newWaiters() *waiters { return &waiters{m: map[string]*waiter{}} }

func (w *waiters) wait(id string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	wt := w.m[id]
	if wt == nil {
		wt = &waiter{ch: make(chan struct{})}
		w.m[id] = wt
	}
	wt.count++
	return wt.ch
}

func (w *waiters) forget(id string, ch chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt := w.m[id]; wt != nil && wt.ch == ch {
		if wt.count--; wt.count == 0 {
			delete(w.m, id)
		}
	}
}

func (w *waiters) signal(id string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if wt := w.m[id]; wt != nil {
		close(wt.ch)
		delete(w.m, id)
	}
}
