package httpidem

import (
	"net/http"

	"github.com/idemgate/idemgate/contract"
)

// An approved operation runs the request its approver saw (issue 24, 7.7):
// the approval keeps the headers of the request that asked for it, and
// the retry that executes sends those, with only what belongs to the
// attempt itself taken from the retry. A header added or changed since
// (X-Dry-Run, Stripe-Account) never reaches the handler.

// attemptHeaders belong to each attempt, never to an approval: who sends
// it (credentials, which an approver must not be shown), its trace, the
// description of the body it carries (whose meaning the fingerprint
// binds), and the idempotency protocol's own.
var attemptHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie", "Traceparent", "Tracestate",
	"Baggage", "Content-Type", "Content-Length", "Content-Encoding", contract.HeaderKey, contract.HeaderPrefer,
	contract.HeaderRun}

// approvalHeaders are what an approval for a request with header h keeps:
// all but the attempt's own and the hop-by-hop ones. Never nil: an
// approval with none still says so (see ledger.Approval.Headers).
func approvalHeaders(h http.Header, rt *route) http.Header {
	kept := h.Clone()
	if kept == nil {
		kept = http.Header{}
	}
	contract.StripHopByHop(kept)
	for _, name := range attemptHeaders {
		delete(kept, name)
	}
	if rt.keyHeader != "" {
		kept.Del(rt.keyHeader)
	}
	return kept
}

// asApproved is r as its approved request: the approval's headers, and
// the attempt's own from r. An approval that kept none (nil: it was opened
// before approvals kept headers) leaves r as it is.
func asApproved(r *http.Request, rt *route, approved http.Header) *http.Request {
	if approved == nil {
		return r
	}
	h := approved.Clone()
	for _, name := range append(attemptHeaders, rt.keyHeader) {
		if v, ok := r.Header[http.CanonicalHeaderKey(name)]; ok {
			h[http.CanonicalHeaderKey(name)] = v
		}
	}
	out := r.WithContext(r.Context())
	out.Header = h
	return out
}
