package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
	"github.com/idemgate/idemgate/ledger"
)

// upstreamClient is one upstream's tuned transport and its settings.
type upstreamClient struct {
	name   string
	cfg    *Upstream
	client *http.Client
	plain  *httputil.ReverseProxy // for routes that are not recorded
	log    *slog.Logger
	origin *origin // the upstream's own, to recognise it in Location
}

// newUpstreamClient builds an upstream's client; wrap, if not nil, wraps
// its transport (Deps.Transport: traces).
func newUpstreamClient(name string, u *Upstream, log *slog.Logger, wrap func(http.RoundTripper) http.RoundTripper) *upstreamClient {
	var t http.RoundTripper = &http.Transport{
		Proxy:                 nil, // the upstream is addressed directly
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          u.MaxConns,
		MaxIdleConnsPerHost:   u.MaxConns,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: u.Timeout,
		ExpectContinueTimeout: time.Second,
		WriteBufferSize:       32 << 10,
		ReadBufferSize:        32 << 10,
	}
	if wrap != nil {
		t = wrap(t)
	}
	uc := &upstreamClient{name: name, cfg: u, log: log, origin: originOf(u.target), client: &http.Client{Transport: t,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	uc.origin.resolve()
	uc.plain = &httputil.ReverseProxy{
		// The proxy has removed the hop-by-hop headers (keeping an
		// upgrade's) and the X-Forwarded ones; direct does the rest.
		Rewrite: func(pr *httputil.ProxyRequest) { uc.direct(pr, "") },
		ModifyResponse: func(resp *http.Response) error {
			uc.localize(resp.Header)
			return nil
		},
		Transport:  t,
		BufferPool: bufferPool{},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			// The upstream's address and the error's details stay here.
			uc.logFailure(r.Context(), "", err)
			contract.NewProblem(contract.CodeUpstreamUnavailable, "upstream "+name+" did not answer").Write(w)
		},
	}
	return uc
}

// setHeaders adds the gateway's own headers for the upstream: its
// credentials, and the key when the upstream is to see it.
func (uc *upstreamClient) setHeaders(h http.Header, key string) {
	if key != "" && uc.cfg.ForwardKey {
		// Written under a lower-case name on purpose: Go's transport treats a
		// request with an Idempotency-Key header as replayable and re-sends
		// it by itself when a reused connection fails after writing it. That
		// is exactly the blind retry this gateway exists to prevent. Header
		// names are case-insensitive, so the upstream reads the same key.
		h[strings.ToLower(contract.HeaderKey)] = []string{key}
	}
	for k, v := range uc.cfg.Headers {
		h.Set(k, v)
	}
}

// UpstreamKey is the Idempotency-Key forwarded to an upstream: the
// agent's key in its tenant's name, and its namespace's unless it is the
// clients' (ledger.UpstreamKey), as the outbox's relay sends an effect's.
func UpstreamKey(tenant, namespace, key string) string {
	return ledger.UpstreamKey(tenant, namespace, key)
}

// bufferPool shares copy buffers between proxied responses.
type bufferPool struct{}

var buffers = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (bufferPool) Get() []byte  { return *(buffers.Get().(*[]byte)) }
func (bufferPool) Put(b []byte) { buffers.Put(&b) }

// writeProxy forwards a recorded write and tells the middleware what its
// outcome means, which the status alone cannot: whether anything was sent.
type writeProxy struct {
	uc          *upstreamClient
	maxResponse int64
	hold        time.Duration // see Config.HoldBeforeForward
}

func (p writeProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	exec := httpidem.Current(r)
	if exec == nil { // a keyless request to a route that does not require one
		p.uc.plain.ServeHTTP(w, r)
		return
	}
	time.Sleep(p.hold)
	out, sent := p.outbound(r, UpstreamKey(PrincipalFrom(r.Context()).Tenant, exec.Namespace(), exec.Key()))
	// Detached from the client: one that gives up must not cut the call
	// short and turn an answer its retry could replay into an unknown.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(out.Context()), p.uc.cfg.Timeout)
	defer cancel()
	resp, err := p.uc.client.Do(out.WithContext(ctx))
	if err != nil {
		p.uc.logFailure(r.Context(), exec.OperationID(), err)
		p.failed(w, exec, err, sent.Load())
		return
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.maxResponse+1))
	if err != nil { // the status came, the rest was cut: the effect may be done
		p.uc.logFailure(r.Context(), exec.OperationID(), fmt.Errorf("reading the answer: %w", err))
		exec.Settle(contract.FateUnknown, "upstream_body_cut")
		prob := contract.NewProblem(contract.CodeOutcomeUnknown, "the upstream's answer was cut off: "+
			"the request may have been applied").WithStatus(http.StatusBadGateway)
		writeFor(w, prob, exec, ledger.Unknown)
		return
	}
	contract.StripHopByHop(resp.Header)
	p.uc.localize(resp.Header) // before it is stored: replays say the same
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	if int64(len(body)) > p.maxResponse { // too large to store: streamed, left unknown
		_, _ = io.Copy(w, resp.Body)
	}
}

// outbound builds the upstream request, and a flag that turns true once
// its headers have been written: from then on the upstream may act on it.
func (p writeProxy) outbound(r *http.Request, key string) (*http.Request, *atomic.Bool) {
	sent := new(atomic.Bool)
	trace := &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }}
	out := r.Clone(httptrace.WithClientTrace(r.Context(), trace))
	out.RequestURI = ""
	contract.StripHopByHop(out.Header)
	p.uc.direct(&httputil.ProxyRequest{In: r, Out: out}, key)
	return out, sent
}

// failed answers a request the upstream did not answer. Nothing written:
// released, safe to retry. Written and then lost: unknown, never resent.
func (p writeProxy) failed(w http.ResponseWriter, exec *httpidem.Execution, err error, sent bool) {
	if !sent {
		exec.Settle(contract.FateReleased, "upstream_unreachable")
		prob := contract.NewProblem(contract.CodeUpstreamUnavailable,
			"the upstream could not be reached and nothing was sent; retry with the same key")
		prob.RetryAfter = 1
		writeFor(w, prob, exec, ledger.Prepared)
		return
	}
	code, status := "upstream_reset", http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) || isTimeout(err) {
		code, status = "upstream_timeout", http.StatusGatewayTimeout
	}
	exec.Settle(contract.FateUnknown, code)
	prob := contract.NewProblem(contract.CodeOutcomeUnknown, "the request reached the upstream and its answer was lost: "+
		"it may have been applied, and will not be re-sent").WithStatus(status)
	writeFor(w, prob, exec, ledger.Unknown)
}

// writeFor sends a problem about the operation exec runs, now in state:
// its id, its state and its status resource, the one link an agent
// follows to learn how it ended (the 409 of every retry carries the same).
func writeFor(w http.ResponseWriter, prob *contract.Problem, exec *httpidem.Execution, state ledger.State) {
	prob.For(&ledger.Operation{ID: exec.OperationID(), State: state}, contract.ControlPrefix).Write(w)
}

// logFailure says, at error level, why a call to the upstream got no
// usable answer: the agent's problem hides it, the operator needs it. The
// request URL is left out (its query may carry a key or personal data);
// the transport's errors name header fields, never their values.
func (uc *upstreamClient) logFailure(ctx context.Context, opID string, err error) {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if errors.Is(err, context.DeadlineExceeded) {
		err = fmt.Errorf("no answer within the upstream's timeout (%s): %w", uc.cfg.Timeout, err)
	}
	level, msg := slog.LevelError, "upstream call failed"
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		level, msg = slog.LevelInfo, "upstream call abandoned: the client went away"
	}
	attrs := []slog.Attr{slog.String("upstream", uc.name), slog.String("error", err.Error())}
	if opID != "" {
		attrs = append(attrs, slog.String("operation_id", opID))
	}
	uc.log.LogAttrs(ctx, level, msg, attrs...)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
