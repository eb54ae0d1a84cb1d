package webui

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
)

// A form is accepted only when two checks pass. The origin check
// (net/http's CrossOriginProtection, in ServeHTTP) refuses a browser's post
// from another origin by its Sec-Fetch-Site or Origin header. The CSRF
// token (here) refuses a post whose form did not come from this session's
// own pages: each session has a random token, put in every form it is
// shown and compared in constant time. Either alone stops a cross-site
// form; both together also stop a client that sends neither header.

// randomText returns 256 random bits, URL-safe: a session id or a token.
func randomText() string {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("webui: no randomness: " + err.Error())
	}
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// sameToken compares a token with the one expected in constant time; an
// empty one never matches.
func sameToken(want, got string) bool {
	return want != "" && got != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}
