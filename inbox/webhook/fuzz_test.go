package webhook_test

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/inbox/webhook"
)

const fuzzStripeSecret, fuzzGitHubSecret = "whsec_fuzz", "fuzz"

var fuzzNow = time.Unix(vectorTimestamp, 0)

func hexMAC(secret string, parts ...string) string {
	m := hmac.New(sha256.New, []byte(secret))
	for _, p := range parts {
		m.Write([]byte(p))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// FuzzStripeHeader: no Stripe-Signature panics the parser, and one is
// accepted only if it holds the body's true v1 for a timestamp it names.
func FuzzStripeHeader(f *testing.F) {
	ts := strconv.Itoa(vectorTimestamp)
	good := "t=" + ts + ",v1=" + hexMAC(fuzzStripeSecret, ts+".", "{}")
	for _, s := range []string{good, good + ",v0=00", "t=1,t=2,v1=", "v1=zz", "t=", ",,,", "t=" + ts + ",v1=" + strings.Repeat("a", 64)} {
		f.Add(s, "{}")
	}
	v := verifier(f, webhook.Stripe, fuzzNow, fuzzStripeSecret)
	f.Fuzz(func(t *testing.T, header, body string) {
		if v.Verify(http.Header{"Stripe-Signature": {header}}, []byte(body)) != nil {
			return
		}
		for _, item := range strings.Split(header, ",") {
			if k, val, _ := strings.Cut(strings.TrimSpace(item), "="); k == "t" &&
				strings.Contains(strings.ToLower(header), "v1="+hexMAC(fuzzStripeSecret, val+".", body)) {
				return
			}
		}
		t.Fatalf("accepted %q for %q without its signature", header, body)
	})
}

// FuzzGitHubHeader: X-Hub-Signature-256 is accepted only when it is the
// body's true signature (hex in either case).
func FuzzGitHubHeader(f *testing.F) {
	for _, s := range []string{"sha256=" + hexMAC(fuzzGitHubSecret, "x"), "sha256=", "sha1=00", "sha256=zz", ""} {
		f.Add(s, "x")
	}
	v := verifier(f, webhook.GitHub, fuzzNow, fuzzGitHubSecret)
	f.Fuzz(func(t *testing.T, header, body string) {
		h := http.Header{"X-Hub-Signature-256": {header}, "X-Github-Delivery": {"d"}}
		if v.Verify(h, []byte(body)) == nil && !strings.EqualFold(strings.TrimSpace(header), "sha256="+hexMAC(fuzzGitHubSecret, body)) {
			t.Fatalf("accepted %q for %q", header, body)
		}
	})
}

// FuzzStandardHeaders: webhook-timestamp and webhook-signature are
// accepted only with the body's true "v1,…" (HMAC) or "v1a,…" (ed25519,
// deterministic) for the id and the time sent.
func FuzzStandardHeaders(f *testing.F) {
	priv, whsk, whpk := v1aKey(7)
	v1a, _ := webhook.Sign(webhook.Standard, whsk, vectorID, fuzzNow, []byte(vectorPayload))
	f.Add(vectorID, strconv.Itoa(vectorTimestamp), vectorSignature, vectorPayload)
	f.Add(vectorID, strconv.Itoa(vectorTimestamp), v1a.Get("webhook-signature"), vectorPayload)
	f.Add(vectorID, "x", "v1, v1,, v1a,", "")
	f.Add("", "-1", vectorWrong+" "+vectorSignature, vectorPayload)
	v := verifier(f, webhook.Standard, fuzzNow, vectorSecret, whpk)
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(vectorSecret, "whsec_"))
	f.Fuzz(func(t *testing.T, id, ts, sig, body string) {
		h := http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {sig}}
		if v.Verify(h, []byte(body)) != nil {
			return
		}
		n, err := strconv.ParseInt(ts, 10, 64)
		msg := []byte(id + "." + strconv.FormatInt(n, 10) + "." + body)
		m := hmac.New(sha256.New, key)
		m.Write(msg)
		if err != nil || !strings.Contains(sig, "v1,"+base64.StdEncoding.EncodeToString(m.Sum(nil))) &&
			!strings.Contains(sig, "v1a,"+base64.StdEncoding.EncodeToString(ed25519.Sign(priv, msg))) {
			t.Fatalf("accepted id %q ts %q sig %q for %q", id, ts, sig, body)
		}
	})
}
