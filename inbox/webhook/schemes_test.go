package webhook_test

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	stripewebhook "github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemgate/idemgate/inbox/webhook"
)

func verifier(t testing.TB, scheme string, now time.Time, secrets ...string) *webhook.Verifier {
	t.Helper()
	v, err := webhook.New(webhook.Options{Scheme: scheme, Secrets: secrets, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestGitHubDocumentedExample: GitHub's documentation's example ("Validating
// webhook deliveries") verifies, and nothing else does.
func TestGitHubDocumentedExample(t *testing.T) {
	const secret, payload = "It's a Secret to Everybody", "Hello, World!"
	const sig = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
	v := verifier(t, webhook.GitHub, time.Now(), secret)
	h := http.Header{"X-Hub-Signature-256": {sig}, "X-Github-Delivery": {"72d3162e-cc78-11e3-81ab-4c9367dc0958"}}
	if err := v.Verify(h, []byte(payload)); err != nil {
		t.Fatalf("the documented example is refused: %v", err)
	}
	if got, _ := webhook.Sign(webhook.GitHub, secret, "d", time.Now(), []byte(payload)); got.Get("X-Hub-Signature-256") != sig {
		t.Fatalf("signed %s, documented %s", got.Get("X-Hub-Signature-256"), sig)
	}
	for name, c := range map[string]struct {
		h    http.Header
		body string
		want error
	}{
		"swapped body":      {h, "Hello, World?", webhook.ErrSignature},
		"no delivery id":    {http.Header{"X-Hub-Signature-256": {sig}}, payload, webhook.ErrMissing},
		"no signature":      {http.Header{"X-Github-Delivery": {"d"}}, payload, webhook.ErrMissing},
		"sha1 only":         {http.Header{"X-Hub-Signature-256": {"sha1=" + sig[7:]}, "X-Github-Delivery": {"d"}}, payload, webhook.ErrMalformed},
		"two signatures":    {http.Header{"X-Hub-Signature-256": {sig, sig}, "X-Github-Delivery": {"d"}}, payload, webhook.ErrMalformed},
		"another secret's":  {signed(t, webhook.GitHub, "another", payload), payload, webhook.ErrSignature},
		"truncated hex sig": {http.Header{"X-Hub-Signature-256": {sig[:70]}, "X-Github-Delivery": {"d"}}, payload, webhook.ErrMalformed},
	} {
		if err := v.Verify(c.h, []byte(c.body)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if !v.DigestKey() || v.KeyFrom() != "header:X-Github-Delivery" {
		t.Errorf("github's key: %s, digest %t", v.KeyFrom(), v.DigestKey())
	}
}

func signed(t *testing.T, scheme, secret, body string) http.Header {
	h, err := webhook.Sign(scheme, secret, "d-1", time.Now(), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestStripeAgainstStripesOwnSigner: what stripe-go's own test signer
// (webhook.GenerateTestSignedPayload, a test-only dependency: the binary
// links no Stripe SDK) signs verifies, and what stripe-go refuses is
// refused here too; a rotated header lists two v1s.
func TestStripeAgainstStripesOwnSigner(t *testing.T) {
	const secret, old = "whsec_test_secret", "whsec_old_secret"
	body := []byte(`{"id":"evt_1","object":"event","type":"charge.succeeded"}`)
	now := time.Now()
	p := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: body, Secret: secret, Timestamp: now})
	v := verifier(t, webhook.Stripe, now, secret)
	if err := v.Verify(http.Header{"Stripe-Signature": {p.Header}}, body); err != nil {
		t.Fatalf("stripe-go's signature %q is refused: %v", p.Header, err)
	}
	mine := signed(t, webhook.Stripe, secret, string(body)).Get("Stripe-Signature")
	if err := stripewebhook.ValidatePayload(body, mine, secret); err != nil {
		t.Fatalf("stripe-go refuses what Sign made: %v", err)
	}
	rotated := stripewebhook.GenerateTestSignedPayload(&stripewebhook.UnsignedPayload{Payload: body, Secret: old, Timestamp: now})
	both := p.Header + ",v1=" + strings.Split(rotated.Header, "v1=")[1] + ",v0=6ffbb59b2300aae63f272406069a9788598b792a944a07aba816edb039989a39"
	for name, c := range map[string]struct {
		v    *webhook.Verifier
		sig  string
		body []byte
		want error
	}{
		"rotation, new secret": {v, both, body, nil},
		"rotation, old secret": {verifier(t, webhook.Stripe, now, "whsec_other", old), both, body, nil},
		"swapped body":         {v, p.Header, []byte(`{"id":"evt_2"}`), webhook.ErrSignature},
		"stale":                {verifier(t, webhook.Stripe, now.Add(6*time.Minute), secret), p.Header, body, webhook.ErrTimestamp},
		"from the future":      {verifier(t, webhook.Stripe, now.Add(-6*time.Minute), secret), p.Header, body, webhook.ErrTimestamp},
		"wider tolerance":      {mustNew(t, webhook.Stripe, now.Add(6*time.Minute), 10*time.Minute, secret), p.Header, body, nil},
		"no timestamp":         {v, "v1=" + strings.Split(p.Header, "v1=")[1], body, webhook.ErrMalformed},
		"no v1":                {v, strings.Split(p.Header, ",")[0], body, webhook.ErrMalformed},
		"another secret's":     {verifier(t, webhook.Stripe, now, "whsec_other"), p.Header, body, webhook.ErrSignature},
		"a v1 that is not hex": {v, p.Header + ",v1=zz", body, webhook.ErrMalformed},
	} {
		if err := c.v.Verify(http.Header{"Stripe-Signature": {c.sig}}, c.body); !errors.Is(err, c.want) && !(c.want == nil && err == nil) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	if err := v.Verify(http.Header{}, body); !errors.Is(err, webhook.ErrMissing) {
		t.Errorf("no header: %v", err)
	}
}

func mustNew(t testing.TB, scheme string, now time.Time, tol time.Duration, secrets ...string) *webhook.Verifier {
	v, err := webhook.New(webhook.Options{Scheme: scheme, Secrets: secrets, Tolerance: tol, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestStandardRotation: a header signed under two secrets passes a
// verifier that knows either, and a verifier with two secrets accepts
// either's signature.
func TestStandardRotation(t *testing.T) {
	const a, b = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2Vjb25kIHNlY3JldCBvZiAyNCBieXRlcw=="
	now := time.Now()
	body := []byte(`{"type":"invoice.paid"}`)
	ha, _ := webhook.Sign(webhook.Standard, a, "msg_1", now, body)
	hb, _ := webhook.Sign(webhook.Standard, b, "msg_1", now, body)
	both := ha.Clone()
	both.Set("webhook-signature", hb.Get("webhook-signature")+" "+ha.Get("webhook-signature"))
	for name, c := range map[string]struct {
		v *webhook.Verifier
		h http.Header
	}{
		"two signatures, old secret": {verifier(t, webhook.Standard, now, a), both},
		"two signatures, new secret": {verifier(t, webhook.Standard, now, b), both},
		"two secrets, old signature": {verifier(t, webhook.Standard, now, b, a), ha},
		"two secrets, new signature": {verifier(t, webhook.Standard, now, b, a), hb},
	} {
		if err := c.v.Verify(c.h, body); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if v := verifier(t, webhook.Standard, now, a); v.KeyFrom() != "header:Webhook-Id" || v.DigestKey() {
		t.Errorf("standard's key: %s", v.KeyFrom())
	}
}
