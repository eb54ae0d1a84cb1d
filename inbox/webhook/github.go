package webhook

import (
	"crypto/hmac"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// GitHub's headers: the signature, and the delivery id (unsigned).
const (
	HeaderGitHubSignature = "X-Hub-Signature-256"
	HeaderGitHubDelivery  = "X-Github-Delivery"
)

// parseGitHub reads "sha256=<64 hex digits>".
func parseGitHub(v string) ([]byte, error) {
	hexSig, ok := strings.CutPrefix(v, "sha256=")
	sig, err := hex.DecodeString(hexSig)
	if !ok || err != nil || len(sig) != 32 {
		return nil, fmt.Errorf("%w: %s: want sha256=<64 hex digits>", ErrMalformed, HeaderGitHubSignature)
	}
	return sig, nil
}

// newGitHub checks GitHub's scheme: HMAC-SHA256 of the body under the
// secret, compared in constant time, under every secret. The delivery id
// must be there (it is the key), though no signature covers it.
func newGitHub(secrets []string) func(http.Header, []byte, time.Time) error {
	return func(h http.Header, body []byte, _ time.Time) error {
		v, err := oneHeader(h, HeaderGitHubSignature)
		if err != nil {
			return err
		}
		if _, err := oneHeader(h, HeaderGitHubDelivery); err != nil {
			return err
		}
		sig, err := parseGitHub(v)
		if err != nil {
			return err
		}
		for _, s := range secrets {
			if hmac.Equal(sig, mac([]byte(s), body)) {
				return nil
			}
		}
		return ErrSignature
	}
}

// signGitHub signs as GitHub does, under the delivery id.
func signGitHub(secret, delivery string, body []byte) http.Header {
	h := http.Header{}
	h.Set(HeaderGitHubSignature, "sha256="+hex.EncodeToString(mac([]byte(secret), body)))
	h.Set(HeaderGitHubDelivery, delivery)
	return h
}
