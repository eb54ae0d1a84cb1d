package control

import (
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
	"golang.org/x/net/http/httpguts"
)

// ownHeaders are the gateway's to set: on every replay, or on a probe's
// answer only (Idempotency-Reconciled: an operator's word is no proof).
var ownHeaders = []string{contract.HeaderReplayed, contract.HeaderOperation, contract.HeaderDuplicateOf,
	contract.HeaderReconciled}

// storedAnswer checks a and returns it as the response to store, with
// canonical header names. max bounds the body as max_response bounds an
// upstream's (0: contract.DefaultMaxResponse). A status must be final (200 to 599:
// a 1xx cannot be replayed as the answer), and headers must be ones a
// replay can send as given: valid names and values, neither hop-by-hop
// nor the gateway's own.
func storedAnswer(a contract.Answer, max int64) (*ledger.Response, error) {
	if max <= 0 {
		max = contract.DefaultMaxResponse
	}
	switch {
	case a.Status < 200 || a.Status > 599:
		return nil, fmt.Errorf("status %d: want a final status, 200 to 599", a.Status)
	case int64(len(a.Body)) > max:
		return nil, fmt.Errorf("body of %d bytes: over max_response (%d)", len(a.Body), max)
	case !utf8.ValidString(a.Body):
		return nil, fmt.Errorf("body: want UTF-8 text")
	case a.Body != "" && (a.Status == http.StatusNoContent || a.Status == http.StatusNotModified):
		return nil, fmt.Errorf("status %d has no body", a.Status)
	}
	h := make(http.Header, len(a.Headers))
	for name, values := range a.Headers {
		k := textproto.CanonicalMIMEHeaderKey(name)
		if _, twice := h[k]; twice {
			return nil, fmt.Errorf("header %s given twice (names are case-insensitive)", k)
		}
		if err := checkHeader(k, values, len(a.Body)); err != nil {
			return nil, err
		}
		h[k] = slices.Clone(values)
	}
	return &ledger.Response{Status: a.Status, Header: h, Body: []byte(a.Body)}, nil
}

// checkHeader refuses a header a replay could not send as given.
func checkHeader(k string, values []string, bodyLen int) error {
	switch {
	case !httpguts.ValidHeaderFieldName(k):
		return fmt.Errorf("header %q: not a valid name", k)
	case len(values) == 0:
		return fmt.Errorf("header %s: no value", k)
	case contract.IsHopByHop(k):
		return fmt.Errorf("header %s: hop-by-hop, never replayed", k)
	case slices.Contains(ownHeaders, k):
		return fmt.Errorf("header %s: the gateway's own, not an answer's", k)
	case k == "Content-Encoding":
		return fmt.Errorf("header %s: give the body decoded, without it", k)
	case k == "Content-Length" && (len(values) != 1 || values[0] != strconv.Itoa(bodyLen)):
		return fmt.Errorf("header Content-Length: the body has %d bytes", bodyLen)
	}
	for _, v := range values {
		if !httpguts.ValidHeaderFieldValue(v) {
			return fmt.Errorf("header %s: value holds a control character (CR, LF, NUL)", k)
		}
	}
	return nil
}
