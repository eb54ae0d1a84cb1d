package webhook_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/inbox/webhook"
)

// v1aKey is a fixed ed25519 key: its seed as a whsk_ private key (the
// sender's) and its whpk_ public key (the receiver's).
func v1aKey(seed byte) (priv ed25519.PrivateKey, whsk, whpk string) {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed + byte(i)
	}
	priv = ed25519.NewKeyFromSeed(s)
	return priv, "whsk_" + base64.StdEncoding.EncodeToString(s),
		"whpk_" + base64.StdEncoding.EncodeToString(priv.Public().(ed25519.PublicKey))
}

// TestStandardV1a: the specification's asymmetric signatures. Sign's
// v1a is ed25519 over "msg_id.timestamp.payload", as the specification
// says (ed25519 is deterministic: the expected signature is computed
// here directly); a receiver holding the whpk_ public key accepts it,
// beside v1 signatures and under a rotation, and refuses a swapped body,
// another key's signature, a receiver configured with a private key, and
// a flood of v1a signatures.
func TestStandardV1a(t *testing.T) {
	priv, whsk, whpk := v1aKey(1)
	_, _, otherPub := v1aKey(2)
	at := time.Unix(vectorTimestamp, 0)
	h, err := webhook.Sign(webhook.Standard, whsk, vectorID, at, []byte(vectorPayload))
	want := "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, []byte(vectorID+"."+strconv.Itoa(vectorTimestamp)+"."+vectorPayload)))
	if err != nil || h.Get("webhook-signature") != want {
		t.Fatalf("signed %q (%v), want %q", h.Get("webhook-signature"), err, want)
	}
	mixed := vectorHeaders(vectorWrong+" "+want+" "+vectorSignature, vectorTimestamp)
	for name, c := range map[string]struct {
		keys []string
		h    http.Header
		body string
		want error
	}{
		"the public key":          {[]string{whpk}, h, vectorPayload, nil},
		"beside an HMAC secret":   {[]string{vectorSecret, whpk}, vectorHeaders(want, vectorTimestamp), vectorPayload, nil},
		"v1 and v1a in a header":  {[]string{otherPub, vectorSecret}, mixed, vectorPayload, nil},
		"rotated keys":            {[]string{otherPub, whpk}, h, vectorPayload, nil},
		"swapped body":            {[]string{whpk}, h, vectorPayload + " ", webhook.ErrSignature},
		"another key":             {[]string{otherPub}, h, vectorPayload, webhook.ErrSignature},
		"v1a to an HMAC receiver": {[]string{vectorSecret}, h, vectorPayload, webhook.ErrSignature},
		"a flood of v1a": {[]string{otherPub}, vectorHeaders(strings.Repeat(vectorWrong[:2]+"a"+vectorWrong[2:]+" ", 17)+want,
			vectorTimestamp), vectorPayload, webhook.ErrMalformed},
		"the specification's example header": {[]string{whpk}, vectorHeaders("v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4= "+
			"v1a,hnO3f9T8Ytu9HwrXslvumlUpqtNVqkhqw/enGzPCXe5BdqzCInXqYXFymVJaA7AZdpXwVLPo3mNl8EM+m7TBAg==", vectorTimestamp),
			vectorPayload, webhook.ErrSignature},
	} {
		v, err := webhook.New(webhook.Options{Scheme: webhook.Standard, Secrets: c.keys, Now: func() time.Time { return at }})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := v.Verify(c.h, []byte(c.body)); !errors.Is(err, c.want) && !(err == nil && c.want == nil) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
	for _, bad := range []string{whsk, "whpk_" + base64.StdEncoding.EncodeToString([]byte("short")), "whpk_!!"} {
		if _, err := webhook.New(webhook.Options{Scheme: webhook.Standard, Secrets: []string{bad}}); err == nil {
			t.Errorf("%.12s…: accepted as a receiver's key", bad)
		}
	}
}
