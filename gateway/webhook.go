package gateway

import (
	"bytes"
	"context"
	"fmt"
	"github.com/idemgate/idemgate/config"
	"io"
	"log/slog"
	"net/http"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/fingerprint"
)

// defaultMaxBody is httpidem's default bound on a body, which a webhook
// route's verification reads first.
const defaultMaxBody = 1 << 20

// signed authenticates a webhook route's deliveries by their signature
// (docs/design.md, "Inbox: messages and webhooks"), before anything is
// reserved: it reads the raw body, verifies it with the route's
// verifier, and only then hands the request, its body restored, to next
// as the route's principal (webhook:<path>, of the route's tenant). A bad
// or missing signature, or a timestamp outside the tolerance, is 401 and
// nothing else happens: no reservation, no forwarding.
func (g *Gateway) signed(rc *config.Route, next http.Handler) http.Handler {
	w := rc.Webhook
	who := &config.Principal{Name: "webhook:" + rc.Pattern(), Tenant: w.Tenant}
	limit := int64(rc.MaxBody)
	if limit <= 0 {
		limit = defaultMaxBody
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, prob := rawBody(r, limit)
		if prob != nil {
			prob.Write(rw)
			return
		}
		if err := w.Verifier().Verify(r.Header, body); err != nil {
			// The reason names a header or a check, never a secret or a
			// signature.
			g.log.Warn("webhook refused", slog.String("route", rc.Match), slog.String("scheme", w.Scheme),
				slog.String("reason", err.Error()), slog.String("remote", r.RemoteAddr))
			contract.NewProblem(contract.CodeUnauthorized, fmt.Sprintf("webhook signature (%s): %v; nothing was done",
				w.Scheme, err)).Write(rw)
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		next.ServeHTTP(rw, r.WithContext(context.WithValue(r.Context(), principalKey{}, who)))
	})
}

// rawBody reads at most limit bytes of r's body, as received.
func rawBody(r *http.Request, limit int64) ([]byte, *contract.Problem) {
	if r.ContentLength > limit {
		return nil, tooLarge(limit)
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if err != nil {
		return nil, contract.NewProblem(contract.CodeInvalidRequest, "reading the body: "+err.Error())
	}
	if int64(len(body)) > limit {
		return nil, tooLarge(limit)
	}
	return body, nil
}

func tooLarge(limit int64) *contract.Problem {
	return contract.ProblemFor(fmt.Errorf("%w: body over %d bytes", fingerprint.ErrTooLarge, limit))
}
