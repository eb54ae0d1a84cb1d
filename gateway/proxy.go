package gateway

import (
	"context"
	"errors"
	"fmt"
	"github.com/idemgate/idemgate/config"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/httpidem"
)

// upstreamClient is one upstream's tuned transport and its settings.
type upstreamClient struct {
	name   string
	cfg    *config.Upstream
	client *http.Client
	plain  *httputil.ReverseProxy // for routes that are not recorded
	log    *slog.Logger
	origin *origin // the upstream's own, to recognise it in Location
}

// newUpstreamClient builds an upstream's client; wrap, if not nil, wraps
// its transport (Deps.Transport: traces).
func newUpstreamClient(name string, u *config.Upstream, log *slog.Logger, wrap func(http.RoundTripper) http.RoundTripper) *upstreamClient {
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
	uc := &upstreamClient{name: name, cfg: u, log: log, origin: originOf(u.Target()), client: &http.Client{Transport: t,
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
	resp, done, err := p.uc.send(p.uc.outbound(r, exec.UpstreamKey()), exec.OperationID())
	if err != nil {
		exec.Failed(err)
		return
	}
	defer done()
	body, err := io.ReadAll(io.LimitReader(resp.Body, p.maxResponse+1))
	if err != nil { // the status came, the rest was cut: the effect may be done
		p.uc.logFailure(r.Context(), exec.OperationID(), fmt.Errorf("reading the answer: %w", err))
		exec.Failed(contract.NoAnswer("upstream", fmt.Errorf("the upstream's answer was cut off: %w", err)))
		return
	}
	h := w.Header()
	for k, v := range resp.Header {
		h[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
	if int64(len(body)) > p.maxResponse { // too large to keep: streamed, a stand-in kept
		_, _ = io.Copy(w, resp.Body)
	}
}

// outbound is r as the upstream is sent it: hop-by-hop headers removed,
// the gateway's own headers and the key (when forwarded) set.
func (uc *upstreamClient) outbound(r *http.Request, key string) *http.Request {
	out := r.Clone(r.Context())
	out.RequestURI = ""
	contract.StripHopByHop(out.Header)
	uc.direct(&httputil.ProxyRequest{In: r, Out: out}, key)
	return out
}

// send sends out, detached from its caller (one that gives up must not
// cut the call short and turn an answer its retry could replay into an
// unknown), within the upstream's timeout. The answer's headers are
// ready to store (hop-by-hop removed, Location made the gateway's); done
// closes its body and ends the call. No answer is an effect's error by
// the executor's one rule: nothing written, contract.NotSent; written,
// contract.NoAnswer.
func (uc *upstreamClient) send(out *http.Request, opID string) (resp *http.Response, done func(), err error) {
	sent := new(atomic.Bool)
	trace := &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }}
	ctx, cancel := context.WithTimeout(httptrace.WithClientTrace(context.WithoutCancel(out.Context()), trace),
		uc.cfg.Timeout)
	resp, err = uc.client.Do(out.WithContext(ctx))
	if err != nil {
		cancel()
		uc.logFailure(out.Context(), opID, err)
		if !sent.Load() {
			return nil, nil, contract.NotSent("upstream", err)
		}
		return nil, nil, contract.NoAnswer("upstream", err)
	}
	contract.StripHopByHop(resp.Header)
	uc.localize(resp.Header) // before it is stored: replays say the same
	return resp, func() { _ = resp.Body.Close(); cancel() }, nil
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
