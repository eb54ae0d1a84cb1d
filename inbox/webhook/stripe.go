package webhook

import (
	"crypto/hmac"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// HeaderStripe is Stripe's signature header.
const HeaderStripe = "Stripe-Signature"

// maxSignatures bounds the signatures one header may list (each is an
// HMAC compare): rotation needs two or three.
const maxSignatures = 16

// stripeHeader is a parsed Stripe-Signature: its timestamp and its v1
// signatures (other schemes, v0 among them, are ignored, as Stripe says).
type stripeHeader struct {
	t  int64
	v1 [][]byte
}

// parseStripe reads "t=1492774577,v1=5257a8…,v1=…,v0=…". The timestamp
// must be there once; a v1 that is not hex is malformed, not skipped.
func parseStripe(v string) (stripeHeader, error) {
	var sh stripeHeader
	seenT := false
	for _, item := range strings.Split(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return sh, fmt.Errorf("%w: %s: an item without '='", ErrMalformed, HeaderStripe)
		}
		switch k {
		case "t":
			ts, err := strconv.ParseInt(val, 10, 64)
			if err != nil || seenT {
				return sh, fmt.Errorf("%w: %s: want one t=<unix time>", ErrMalformed, HeaderStripe)
			}
			sh.t, seenT = ts, true
		case "v1":
			sig, err := hex.DecodeString(val)
			if err != nil || len(sig) != 32 || len(sh.v1) == maxSignatures {
				return sh, fmt.Errorf("%w: %s: want v1=<64 hex digits>, at most %d", ErrMalformed, HeaderStripe, maxSignatures)
			}
			sh.v1 = append(sh.v1, sig)
		}
	}
	if !seenT || len(sh.v1) == 0 {
		return sh, fmt.Errorf("%w: %s: want t=… and at least one v1=…", ErrMalformed, HeaderStripe)
	}
	return sh, nil
}

// newStripe checks Stripe's scheme: HMAC-SHA256 of "t.body" under the
// secret as written (whsec_… included), compared in constant time with
// every v1 the header lists, under every secret.
func newStripe(secrets []string, tol time.Duration) func(http.Header, []byte, time.Time) error {
	return func(h http.Header, body []byte, now time.Time) error {
		v, err := oneHeader(h, HeaderStripe)
		if err != nil {
			return err
		}
		sh, err := parseStripe(v)
		if err != nil {
			return err
		}
		if !within(sh.t, now, tol) {
			return ErrTimestamp
		}
		t := []byte(strconv.FormatInt(sh.t, 10) + ".")
		for _, s := range secrets {
			want := mac([]byte(s), t, body)
			for _, sig := range sh.v1 {
				if hmac.Equal(sig, want) {
					return nil
				}
			}
		}
		return ErrSignature
	}
}

// signStripe signs as Stripe does.
func signStripe(secret string, at time.Time, body []byte) http.Header {
	t := strconv.FormatInt(at.Unix(), 10)
	h := http.Header{}
	h.Set(HeaderStripe, "t="+t+",v1="+hex.EncodeToString(mac([]byte(secret), []byte(t+"."), body)))
	return h
}
