package outbox

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// maxAnswer bounds what is read of a target's answer: enough for its
// reference, and the connection is then dropped.
const maxAnswer = 1 << 20

// deliver sends e to the target with its derived key and says what the
// answer, or its absence, means. Next is set only from a Retry-After.
func (t *target) deliver(ctx context.Context, client *http.Client, e *ledger.Effect) ledger.EffectOutcome {
	ctx, cancel := context.WithTimeout(ctx, t.Timeout)
	defer cancel()
	if t.Sender != nil {
		return t.Sender.Send(ctx, e, e.UpstreamKey())
	}
	sent := new(atomic.Bool)
	trace := &httptrace.ClientTrace{WroteHeaders: func() { sent.Store(true) }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), e.Method, t.base+e.Path,
		bytes.NewReader(e.Body))
	if err != nil {
		return ledger.EffectOutcome{State: ledger.Failed, ErrorCode: "invalid_request"}
	}
	t.headers(req.Header, e)
	resp, err := client.Do(req)
	if err != nil {
		return failed(err, sent.Load())
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil { // the status came, the rest was cut: it may be done
		return ledger.EffectOutcome{State: ledger.Unknown, Status: resp.StatusCode, ErrorCode: "target_body_cut"}
	}
	return t.answered(resp, body)
}

// headers sets a delivery's headers: the effect's, then the target's
// (its credentials win), then the derived key in the tenant's name.
func (t *target) headers(h http.Header, e *ledger.Effect) {
	for k, vs := range e.Header {
		h[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
	}
	for k, vs := range t.Header {
		h[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
	}
	// Written under a lower-case name on purpose, as the gateway does: Go's
	// transport treats a request with an "Idempotency-Key" header as
	// replayable and re-sends it by itself when a reused connection fails
	// after writing it. That would hide an unknown delivery from the
	// count of attempts. The target reads the name in any case.
	delete(h, http.CanonicalHeaderKey(t.KeyHeader))
	h[strings.ToLower(t.KeyHeader)] = []string{e.UpstreamKey()}
}

// failed is the outcome of a delivery that got no answer, by the
// executor's one rule (keyed.Classify): nothing sent, it was not applied;
// sent, it may have been.
func failed(err error, sent bool) ledger.EffectOutcome {
	if sent {
		err = contract.NoAnswer("target", err)
	} else {
		err = contract.NotSent("target", err)
	}
	fate, code, _ := contract.ClassifyFailure(err)
	if fate == contract.FateReleased {
		return ledger.EffectOutcome{State: ledger.Prepared, ErrorCode: code}
	}
	return ledger.EffectOutcome{State: ledger.Unknown, ErrorCode: code}
}

// answered maps an answer to its outcome, as the gateway maps an
// upstream's (contract.DefaultClassify), but for redirects: a 3xx is no
// effect made (redirects are not followed), so it fails, definitely.
func (t *target) answered(resp *http.Response, body []byte) ledger.EffectOutcome {
	o := ledger.EffectOutcome{Status: resp.StatusCode}
	code := "http_" + strconv.Itoa(resp.StatusCode)
	switch fate := contract.DefaultClassify(resp.StatusCode); {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		o.State, o.ErrorCode = ledger.Failed, code
	case fate == contract.FateSucceeded:
		o.State, o.ResultRef = ledger.Succeeded, t.resultRef.Of(resp.StatusCode, resp.Header, body)
	case fate == contract.FateFailed:
		o.State, o.ErrorCode = ledger.Failed, code
	case fate == contract.FateReleased:
		o.State, o.ErrorCode = ledger.Prepared, code
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			o.RetryIn = time.Duration(min(s, 3600)) * time.Second
		}
	default:
		o.State, o.ErrorCode = ledger.Unknown, code
	}
	return o
}
