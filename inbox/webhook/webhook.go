// Package webhook verifies a webhook's sender before anything is reserved
// (docs/design.md, "Inbox: messages and webhooks"): the signatures of the
// Standard Webhooks specification (v1 HMAC and v1a ed25519), Stripe's and
// GitHub's, each checked against the raw body (an HMAC compared in
// constant time), with several secrets for rotation.
// It also says where each scheme's key comes from: always from signed
// material, so that a replayed signed body cannot open a second operation
// under a fresh id.
//
// It imports nothing of the module: a verifier is a leaf the gateway calls
// before its data plane, and the drill calls to sign its deliveries.
package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// The schemes.
const (
	// Standard is the Standard Webhooks specification: webhook-id,
	// webhook-timestamp and webhook-signature ("v1,<base64>" and
	// "v1a,<base64>", space separated) over "id.timestamp.body":
	// HMAC-SHA256 with a whsec_ base64 secret (v1), ed25519 with a whpk_
	// public key (v1a). The key is webhook-id.
	Standard = "standard"
	// Stripe is Stripe-Signature ("t=…,v1=<hex>,…"), HMAC-SHA256 over
	// "t.body" with the endpoint's secret as written. The key is the
	// event's id, /id in the signed body.
	Stripe = "stripe"
	// GitHub is X-Hub-Signature-256 ("sha256=<hex>"), HMAC-SHA256 over the
	// body. GitHub signs no timestamp and not its X-GitHub-Delivery, the
	// key: the body's digest is also a business key (DigestKey).
	GitHub = "github"
)

// Schemes lists the schemes a route may name.
func Schemes() []string { return []string{Standard, Stripe, GitHub} }

// The refusals. Every one is the sender's 401: nothing is reserved.
var (
	ErrMissing   = errors.New("a header the signature needs is missing")
	ErrMalformed = errors.New("the signature header is malformed")
	ErrTimestamp = errors.New("the signed timestamp is outside the tolerance")
	ErrSignature = errors.New("no signature matches the body")
)

// DefaultTolerance is how far a signed timestamp may be from now.
const DefaultTolerance = 5 * time.Minute

// Options make a Verifier.
type Options struct {
	Scheme string
	// Secrets are the endpoint's signing secrets: a delivery signed with
	// any of them is accepted (a rotation keeps the old one a while).
	Secrets []string
	// Tolerance bounds |now - signed timestamp| (DefaultTolerance); GitHub
	// signs no timestamp.
	Tolerance time.Duration
	// Now is the clock (time.Now).
	Now func() time.Time
}

// Verifier checks one route's deliveries.
type Verifier struct {
	scheme    string
	tolerance time.Duration
	now       func() time.Time
	check     func(h http.Header, body []byte, now time.Time) error
}

// New makes a verifier; an unknown scheme, no secret, an empty one or one
// the scheme cannot read is an error.
func New(o Options) (*Verifier, error) {
	if len(o.Secrets) == 0 {
		return nil, errors.New("no secret: a webhook route needs its sender's signing secret")
	}
	for i, s := range o.Secrets {
		if strings.TrimSpace(s) == "" {
			return nil, fmt.Errorf("secret %d is empty (an unset variable?): every delivery would be refused, or worse", i+1)
		}
	}
	v := &Verifier{scheme: o.Scheme, tolerance: o.Tolerance, now: o.Now}
	if v.tolerance <= 0 {
		v.tolerance = DefaultTolerance
	}
	if v.now == nil {
		v.now = time.Now
	}
	var err error
	switch o.Scheme {
	case Standard:
		v.check, err = newStandard(o.Secrets, v.tolerance)
	case Stripe:
		v.check = newStripe(o.Secrets, v.tolerance)
	case GitHub:
		v.check = newGitHub(o.Secrets)
	default:
		err = fmt.Errorf("scheme %q: want one of %s", o.Scheme, strings.Join(Schemes(), ", "))
	}
	if err != nil {
		return nil, err
	}
	return v, nil
}

// Verify checks a delivery's headers against its raw body, as received.
// The error is one of ErrMissing, ErrMalformed, ErrTimestamp and
// ErrSignature, and never holds a secret or a signature.
func (v *Verifier) Verify(h http.Header, body []byte) error { return v.check(h, body, v.now()) }

// Scheme is the verifier's scheme.
func (v *Verifier) Scheme() string { return v.scheme }

// KeyFrom is where the verifier's scheme reads its key (KeyOf).
func (v *Verifier) KeyFrom() string { return KeyOf(v.scheme) }

// KeyOf is where scheme's key is read, as a route's key_from: signed
// material in every scheme but GitHub's (see DigestKey).
func KeyOf(scheme string) string {
	switch scheme {
	case Stripe:
		return "body:/id"
	case GitHub:
		return "header:" + HeaderGitHubDelivery
	}
	return "header:" + HeaderStandardID
}

// DigestKey reports whether the body's digest must also be a business
// key: GitHub's delivery id is unsigned, so the same signed body under a
// new id must make no second effect.
func (v *Verifier) DigestKey() bool { return v.scheme == GitHub }

// Sign signs body as scheme's sender does at time at, with id as its
// delivery id (Standard, GitHub; Stripe's id is in the body), and returns
// the headers to send. Tests and idemgate drill deliver with it.
func Sign(scheme, secret, id string, at time.Time, body []byte) (http.Header, error) {
	switch scheme {
	case Standard:
		return signStandard(secret, id, at, body)
	case Stripe:
		return signStripe(secret, at, body), nil
	case GitHub:
		return signGitHub(secret, id, body), nil
	}
	return nil, fmt.Errorf("scheme %q: want one of %s", scheme, strings.Join(Schemes(), ", "))
}

// mac is HMAC-SHA256 of the parts, concatenated, under key.
func mac(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// within reports whether the signed Unix time ts is within tol of now,
// either way: a timestamp from the future is as suspect as a stale one.
func within(ts int64, now time.Time, tol time.Duration) bool {
	d := now.Sub(time.Unix(ts, 0))
	return d <= tol && d >= -tol
}

// oneHeader is h's single value of name; ErrMissing if there is none, and
// ErrMalformed if there are several (which one would the sender mean?).
func oneHeader(h http.Header, name string) (string, error) {
	vs := h.Values(name)
	switch {
	case len(vs) == 0 || strings.TrimSpace(vs[0]) == "":
		return "", fmt.Errorf("%w: %s", ErrMissing, name)
	case len(vs) > 1:
		return "", fmt.Errorf("%w: %d %s headers", ErrMalformed, len(vs), name)
	}
	return strings.TrimSpace(vs[0]), nil
}
