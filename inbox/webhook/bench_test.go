package webhook_test

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"testing"
	"time"

	"github.com/idemgate/idemgate/inbox/webhook"
)

// BenchmarkVerify is each scheme's verification of a 4 KiB delivery
// (standard's v1, and v1a, an ed25519 signature), beside its floor: one HMAC-SHA256 of the same body, compared in
// constant time (what any correct verifier must do at least).
func BenchmarkVerify(b *testing.B) {
	body := bytes.Repeat([]byte(`{"k":"v"},`), 410)
	now := time.Now()
	secrets := map[string]string{webhook.Standard: vectorSecret, webhook.Stripe: "whsec_bench", webhook.GitHub: "bench"}
	for _, scheme := range webhook.Schemes() {
		v := verifier(b, scheme, now, secrets[scheme])
		h, err := webhook.Sign(scheme, secrets[scheme], "msg_bench", now, body)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(scheme, func(b *testing.B) {
			for b.Loop() {
				if err := v.Verify(h, body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	_, whsk, whpk := v1aKey(3)
	v := verifier(b, webhook.Standard, now, whpk)
	h, _ := webhook.Sign(webhook.Standard, whsk, "msg_bench", now, body)
	b.Run("standard-v1a", func(b *testing.B) {
		for b.Loop() {
			if err := v.Verify(h, body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("floor-hmac", func(b *testing.B) {
		want := hmac.New(sha256.New, []byte("bench"))
		want.Write(body)
		sum := want.Sum(nil)
		for b.Loop() {
			m := hmac.New(sha256.New, []byte("bench"))
			m.Write(body)
			if !hmac.Equal(m.Sum(nil), sum) {
				b.Fatal("no match")
			}
		}
	})
}
