// Package drill is `idemgate drill` (docs/design.md, "idemgate drill"): the
// articles' production checks run against any HTTP API, through a fault
// proxy that makes the disputed-write paths happen on demand, each check
// judged by the effects the target performed. This file is the proxy.
package drill

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/contract"
)

// FaultKind names what the proxy does to one request.
type FaultKind string

// The faults. LostResponse lets the target answer and cuts the
// connection before the answer reaches the client: the write happened and
// nobody told the caller. Reset cuts it before anything is forwarded:
// nothing was delivered. Status answers in the target's place (429 with
// Retry-After, 503, 500) without forwarding. Replaced forwards, lets the
// target answer in full, and gives the client the status instead (a 500
// after the write was applied). Delay forwards after a pause. Hold
// forwards once the drill calls Release: a request on its way for as long
// as a check needs, whatever the machine's load.
const (
	Pass         FaultKind = ""
	LostResponse FaultKind = "lost_response"
	Reset        FaultKind = "reset"
	Status       FaultKind = "status"
	Replaced     FaultKind = "replaced"
	Delay        FaultKind = "delay"
	Hold         FaultKind = "hold"
)

// Fault is what happens to one request.
type Fault struct {
	Kind       FaultKind
	Status     int           // Status, Replaced: the code answered (429, 503, 500)
	RetryAfter int           // Status, Replaced: the Retry-After seconds, with 429 or 503
	Delay      time.Duration // Delay: the pause before forwarding
}

// Validate refuses a fault the proxy cannot make.
func (f Fault) Validate() error {
	switch f.Kind {
	case Pass, LostResponse, Reset, Hold:
		return nil
	case Status, Replaced:
		if f.Status < 400 || f.Status > 599 {
			return fmt.Errorf("fault status %d: want a 4xx or 5xx", f.Status)
		}
		return nil
	case Delay:
		if f.Delay <= 0 {
			return errors.New("fault delay: want a positive duration")
		}
		return nil
	}
	return fmt.Errorf("fault %q: want lost_response, reset, status, replaced, delay or hold", f.Kind)
}

// Proxy stands between the drill and the target. Faults are queued: each
// request takes the next, or passes through when none is queued.
type Proxy struct {
	target *url.URL
	rp     *httputil.ReverseProxy

	mu       sync.Mutex
	queue    []Fault
	counts   Counts
	held     chan struct{} // closed by Release; made anew for the next Hold
	inFlight atomic.Int64  // requests the proxy is still handling
}

// Counts is what the proxy did, for a check's report.
type Counts struct {
	Requests  int // received from the client
	Forwarded int // delivered to the target
	Cut       int // connections cut (lost responses and resets)
}

// NewProxy proxies to target (its scheme, host and base path).
func NewProxy(target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("target %q: want http(s)://host[:port][/base]", target)
	}
	p := &Proxy{target: u, held: make(chan struct{})}
	p.rp = &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(u) },
		Transport: &http.Transport{DisableKeepAlives: true}, FlushInterval: -1,
		ErrorLog: log.New(io.Discard, "", 0), // a client gone is part of the drill
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway) // the target did not answer the proxy
		}}
	return p, nil
}

// Next queues f for the next request that has none.
func (p *Proxy) Next(f Fault) error {
	if err := f.Validate(); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.queue = append(p.queue, f)
	return nil
}

// Release lets the requests held so far (Hold) go on to the target.
func (p *Proxy) Release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	close(p.held)
	p.held = make(chan struct{})
}

// Idle waits until the proxy handles no request: a delayed one has been
// delivered and answered.
func (p *Proxy) Idle(ctx context.Context) error {
	for p.inFlight.Load() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

// Counts returns what the proxy did so far.
func (p *Proxy) Counts() Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts
}

// take takes the next fault, and the channel a held request waits on.
func (p *Proxy) take() (Fault, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts.Requests++
	if len(p.queue) == 0 {
		return Fault{}, p.held
	}
	f := p.queue[0]
	p.queue = p.queue[1:]
	return f, p.held
}

func (p *Proxy) count(forwarded, cut int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.counts.Forwarded += forwarded
	p.counts.Cut += cut
}

// ServeHTTP applies the next fault to r.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	f, held := p.take()
	switch f.Kind {
	case Reset:
		_, _ = io.Copy(io.Discard, r.Body)
		p.count(0, 1)
		cut(w)
	case Status:
		_, _ = io.Copy(io.Discard, r.Body)
		answerStatus(w, f)
	case Replaced:
		p.count(1, 0)
		p.rp.ServeHTTP(&discard{header: http.Header{}}, r.WithContext(context.WithoutCancel(r.Context())))
		answerStatus(w, f)
	case LostResponse:
		p.lost(w, r)
	case Delay, Hold:
		// A client that gives up meanwhile does not stop the request:
		// delivered late, as a slow network delivers it.
		if f.Kind == Hold {
			<-held
		} else {
			time.Sleep(f.Delay)
		}
		p.count(1, 0)
		p.rp.ServeHTTP(late{w}, r.WithContext(context.WithoutCancel(r.Context())))
	default:
		p.count(1, 0)
		p.rp.ServeHTTP(w, r)
	}
}

// late is the writer of a request delivered late: w without its
// http.CloseNotifier. Given a request whose context cannot be cancelled,
// ReverseProxy cancels the forwarded request once the writer's
// CloseNotify says the client has gone, so a late delivery whose client
// gave up (the point of Hold and Delay) was cut on its way to the target:
// a target that applies writes under its request's context applied
// nothing, and a naive one seemed to pass. Embedding the interface
// promotes its three methods only.
type late struct{ http.ResponseWriter }

// answerStatus answers f's status in the target's place, as a problem.
func answerStatus(w http.ResponseWriter, f Fault) {
	if f.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(f.RetryAfter))
	}
	w.Header().Set("Content-Type", contract.MediaProblem)
	w.WriteHeader(f.Status)
	fmt.Fprintf(w, `{"type":"about:blank","title":%q,"status":%d}`, http.StatusText(f.Status), f.Status)
}

// lost forwards r, lets the target answer in full (so whatever it does is
// done), and cuts the client's connection without a byte of the answer.
func (p *Proxy) lost(w http.ResponseWriter, r *http.Request) {
	rec := &discard{header: http.Header{}}
	p.count(1, 1)
	p.rp.ServeHTTP(rec, r.WithContext(context.WithoutCancel(r.Context())))
	cut(w)
}

// cut closes the client's connection at once, with nothing written.
func cut(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // HTTP/2: abort the stream instead
	}
	_ = conn.Close()
}

// discard is a response writer that keeps nothing: the target's answer a
// lost response swallows.
type discard struct {
	header http.Header
	status atomic.Int32
}

func (d *discard) Header() http.Header         { return d.header }
func (d *discard) WriteHeader(status int)      { d.status.CompareAndSwap(0, int32(status)) }
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
