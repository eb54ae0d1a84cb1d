package webhook_test

import (
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/inbox/webhook"
)

// The Standard Webhooks specification's published test vectors: the
// secret, message and signature of its libraries' TestWebhookSign, and the
// cases of their verification tables (libraries/go/webhook_test.go and
// its siblings in Python, JavaScript, Java, PHP, Ruby, C# and Elixir).
const (
	vectorSecret    = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	vectorID        = "msg_p5jXN8AQM9LWM0D4loKWxJek"
	vectorTimestamp = 1614265330
	vectorPayload   = `{"test": 2432232314}`
	vectorSignature = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
	// vectorWrong is the tables' "invalid signature".
	vectorWrong = "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
)

func standardAt(t *testing.T, now time.Time, secrets ...string) *webhook.Verifier {
	t.Helper()
	v, err := webhook.New(webhook.Options{Scheme: webhook.Standard, Secrets: secrets, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func vectorHeaders(sig string, ts int64) http.Header {
	h := http.Header{}
	h.Set("webhook-id", vectorID)
	h.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	h.Set("webhook-signature", sig)
	return h
}

// TestStandardVectors: the published signature is what Sign makes and
// what Verify accepts, with and without the whsec_ prefix; the tables'
// refusals are refused, each with its reason.
func TestStandardVectors(t *testing.T) {
	at := time.Unix(vectorTimestamp, 0)
	h, err := webhook.Sign(webhook.Standard, vectorSecret, vectorID, at, []byte(vectorPayload))
	if err != nil || h.Get("webhook-signature") != vectorSignature {
		t.Fatalf("signed %q (%v), the vector is %q", h.Get("webhook-signature"), err, vectorSignature)
	}
	for _, secret := range []string{vectorSecret, strings.TrimPrefix(vectorSecret, "whsec_")} {
		if err := standardAt(t, at, secret).Verify(vectorHeaders(vectorSignature, vectorTimestamp), []byte(vectorPayload)); err != nil {
			t.Fatalf("secret %s: the vector is refused: %v", secret, err)
		}
	}
	v := standardAt(t, at, vectorSecret)
	tol := int64(webhook.DefaultTolerance / time.Second)
	for _, c := range []struct {
		name string
		h    http.Header
		want error
	}{
		{"missing id", del(vectorHeaders(vectorSignature, vectorTimestamp), "webhook-id"), webhook.ErrMissing},
		{"missing timestamp", del(vectorHeaders(vectorSignature, vectorTimestamp), "webhook-timestamp"), webhook.ErrMissing},
		{"missing signature", del(vectorHeaders(vectorSignature, vectorTimestamp), "webhook-signature"), webhook.ErrMissing},
		{"invalid signature", vectorHeaders(vectorWrong, vectorTimestamp), webhook.ErrSignature},
		{"partial signature", vectorHeaders("v1,", vectorTimestamp), webhook.ErrSignature},
		{"old timestamp", vectorHeaders(vectorSignature, vectorTimestamp-tol-1), webhook.ErrTimestamp},
		{"new timestamp", vectorHeaders(vectorSignature, vectorTimestamp+tol+1), webhook.ErrTimestamp},
		{"timestamp not a number", vectorHeaders(vectorSignature, 0), webhook.ErrMalformed},
		{"v2 is not v1", vectorHeaders("v2,"+strings.TrimPrefix(vectorSignature, "v1,"), vectorTimestamp), webhook.ErrSignature},
	} {
		if c.name == "timestamp not a number" {
			c.h.Set("webhook-timestamp", "1614265330.5")
		}
		if err := v.Verify(c.h, []byte(vectorPayload)); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	multi := strings.Join([]string{vectorWrong, "v2," + strings.TrimPrefix(vectorWrong, "v1,"), vectorSignature, vectorWrong}, " ")
	if err := v.Verify(vectorHeaders(multi, vectorTimestamp), []byte(vectorPayload)); err != nil {
		t.Errorf("valid multi sig: %v", err)
	}
	if err := v.Verify(vectorHeaders(vectorSignature, vectorTimestamp), []byte(`{"test": 2432232315}`)); !errors.Is(err, webhook.ErrSignature) {
		t.Errorf("a swapped body: %v", err)
	}
}

// TestEmptySecretsAreRefused: the libraries' "no empty secrets", and a
// secret that is no base64, are errors when the verifier is made.
func TestEmptySecretsAreRefused(t *testing.T) {
	for _, scheme := range webhook.Schemes() {
		for _, secrets := range [][]string{nil, {""}, {"  "}, {"whsec_x", ""}} {
			if _, err := webhook.New(webhook.Options{Scheme: scheme, Secrets: secrets}); err == nil {
				t.Errorf("%s %q: accepted", scheme, secrets)
			}
		}
	}
	for _, s := range []string{"whsec_", "whsec_not base64!"} {
		if _, err := webhook.New(webhook.Options{Scheme: webhook.Standard, Secrets: []string{s}}); err == nil {
			t.Errorf("standard %q: accepted", s)
		}
	}
	if _, err := webhook.New(webhook.Options{Scheme: "svix", Secrets: []string{"s"}}); err == nil {
		t.Error("an unknown scheme is accepted")
	}
}

func del(h http.Header, name string) http.Header {
	h.Del(name)
	return h
}
