package webhook

import (
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// The Standard Webhooks headers.
const (
	HeaderStandardID        = "Webhook-Id"
	HeaderStandardTimestamp = "Webhook-Timestamp"
	HeaderStandardSignature = "Webhook-Signature"
)

// The specification's key prefixes: an HMAC secret (v1), an ed25519
// public key (v1a), and the sender's ed25519 private key, which a
// receiver never needs.
const (
	prefixSecret     = "whsec_"
	prefixPublicKey  = "whpk_"
	prefixPrivateKey = "whsk_"
)

// standardKeys are a route's keys: HMAC secrets, checked by the
// specification's own Go library, and ed25519 public keys.
type standardKeys struct {
	hooks []*standardwebhooks.Webhook
	pubs  []ed25519.PublicKey
}

// newStandard checks deliveries against every key: a "v1,…" signature
// with the specification's Go library (its HMAC and its constant-time
// compare), a "v1a,…" one with crypto/ed25519. The timestamp is checked
// here, against the route's tolerance, since the library's is fixed at
// five minutes.
func newStandard(secrets []string, tol time.Duration) (func(http.Header, []byte, time.Time) error, error) {
	var k standardKeys
	for i, s := range secrets {
		if err := k.add(s); err != nil {
			return nil, fmt.Errorf("secret %d: %w", i+1, err)
		}
	}
	return func(h http.Header, body []byte, now time.Time) error {
		ts, err := standardHeaders(h)
		if err != nil {
			return err
		}
		if !within(ts, now, tol) {
			return ErrTimestamp
		}
		for _, wh := range k.hooks {
			if wh.VerifyIgnoringTimestamp(body, h) == nil {
				return nil
			}
		}
		return k.verifyV1a(h, ts, body)
	}, nil
}

// add reads one key: whpk_<base64 of 32 bytes> is a public key, anything
// else an HMAC secret (whsec_<base64>, or the bare base64).
func (k *standardKeys) add(s string) error {
	switch {
	case strings.HasPrefix(s, prefixPrivateKey):
		return errors.New("a whsk_ key is the sender's private key: give the receiver its public key, whpk_…")
	case strings.HasPrefix(s, prefixPublicKey):
		pub, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, prefixPublicKey))
		if err != nil || len(pub) != ed25519.PublicKeySize {
			return fmt.Errorf("want whpk_ and the base64 of a %d-byte ed25519 public key", ed25519.PublicKeySize)
		}
		k.pubs = append(k.pubs, pub)
	default:
		wh, err := standardwebhooks.NewWebhook(s)
		if err != nil {
			return fmt.Errorf("want whsec_ and base64 (%v)", err)
		}
		k.hooks = append(k.hooks, wh)
	}
	return nil
}

// verifyV1a checks the header's "v1a,<base64>" signatures against the
// public keys; at most maxSignatures are read (each is an ed25519
// verification, tens of microseconds).
func (k *standardKeys) verifyV1a(h http.Header, ts int64, body []byte) error {
	if len(k.pubs) == 0 {
		return ErrSignature
	}
	msg := append([]byte(h.Get(HeaderStandardID)+"."+strconv.FormatInt(ts, 10)+"."), body...)
	n := 0
	for _, token := range strings.Split(h.Get(HeaderStandardSignature), " ") {
		b64, ok := strings.CutPrefix(token, "v1a,")
		if !ok {
			continue
		}
		if n++; n > maxSignatures {
			return fmt.Errorf("%w: more than %d v1a signatures", ErrMalformed, maxSignatures)
		}
		// Only the canonical encoding: one signature, one header text.
		sig, err := base64.StdEncoding.DecodeString(b64)
		if err != nil || len(sig) != ed25519.SignatureSize || base64.StdEncoding.EncodeToString(sig) != b64 {
			continue
		}
		for _, pub := range k.pubs {
			if ed25519.Verify(pub, msg, sig) {
				return nil
			}
		}
	}
	return ErrSignature
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

// signStandard signs as a Standard Webhooks sender does: v1 with an HMAC
// secret (the library), v1a with a whsk_ private key (the base64 of its
// 32-byte seed or 64-byte key).
func signStandard(secret, id string, at time.Time, body []byte) (http.Header, error) {
	var sig string
	if b64, ok := strings.CutPrefix(secret, prefixPrivateKey); ok {
		raw, err := base64.StdEncoding.DecodeString(b64)
		var priv ed25519.PrivateKey
		switch {
		case err == nil && len(raw) == ed25519.SeedSize:
			priv = ed25519.NewKeyFromSeed(raw)
		case err == nil && len(raw) == ed25519.PrivateKeySize:
			priv = raw
		default:
			return nil, errors.New("want whsk_ and the base64 of an ed25519 seed or private key")
		}
		msg := id + "." + strconv.FormatInt(at.Unix(), 10) + "."
		sig = "v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(priv, append([]byte(msg), body...)))
	} else {
		wh, err := standardwebhooks.NewWebhook(secret)
		if err != nil {
			return nil, err
		}
		if sig, err = wh.Sign(id, at, body); err != nil {
			return nil, err
		}
	}
	h := http.Header{}
	h.Set(HeaderStandardID, id)
	h.Set(HeaderStandardTimestamp, strconv.FormatInt(at.Unix(), 10))
	h.Set(HeaderStandardSignature, sig)
	return h, nil
}
