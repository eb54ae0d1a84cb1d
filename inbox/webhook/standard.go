package webhook

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The Standard Webhooks headers.
const (
	HeaderStandardID        = "Webhook-Id"
	HeaderStandardTimestamp = "Webhook-Timestamp"
	HeaderStandardSignature = "Webhook-Signature"
)

// newStandard checks deliveries with the specification's own Go library
// (its HMAC and its constant-time compare of each "v1,…" in the header);
// the timestamp is checked here, against the route's tolerance, since the
// library's is fixed at five minutes.
func newStandard(secrets []string, tol time.Duration) (func(http.Header, []byte, time.Time) error, error) {
	hooks := make([]*standardwebhooks.Webhook, len(secrets))
	for i, s := range secrets {
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			return nil, fmt.Errorf("secret %d: want whsec_ and base64 (%v)", i+1, err)
		}
		hooks[i] = wh
	}
	return func(h http.Header, body []byte, now time.Time) error {
		ts, err := standardHeaders(h)
		if err != nil {
			return err
		}
		if !within(ts, now, tol) {
			return ErrTimestamp
		}
		for _, wh := range hooks {
			if wh.VerifyIgnoringTimestamp(body, h) == nil {
				return nil
			}
		}
		return ErrSignature
	}, nil
}

// standardHeaders checks that the three headers are there, once each, and
// reads the timestamp.
func standardHeaders(h http.Header) (int64, error) {
	for _, name := range []string{HeaderStandardID, HeaderStandardSignature} {
		if _, err := oneHeader(h, name); err != nil {
			return 0, err
		}
	}
	v, err := oneHeader(h, HeaderStandardTimestamp)
	if err != nil {
		return 0, err
	}
	ts, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %s is not a Unix time", ErrMalformed, HeaderStandardTimestamp)
	}
	return ts, nil
}

// signStandard signs as a Standard Webhooks sender does, with the
// library.
func signStandard(secret, id string, at time.Time, body []byte) (http.Header, error) {
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return nil, err
	}
	sig, err := wh.Sign(id, at, body)
	if err != nil {
		return nil, err
	}
	h := http.Header{}
	h.Set(HeaderStandardID, id)
	h.Set(HeaderStandardTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(HeaderStandardSignature, sig)
	return h, nil
}
