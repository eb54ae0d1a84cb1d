package agent

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/idemgate/idemgate/fingerprint"
)

// Keys derive an agent's idempotency keys from its secret: the workflow
// article's stable, deterministic key, a keyed hash of the agent's
// identity, the intent's name and its version. The journal still records
// each key before it is sent; but a journal lost (a new machine, a deleted
// file) no longer loses the keys, so a resume is replayed by the gateway
// instead of performed again. The secret comes from the agent's
// configuration, never from the journal, and never reaches a log.
type Keys struct {
	secret []byte
	agent  string
}

// MinSecret is the shortest secret Keys take: a shorter one could be
// guessed, and another principal of the tenant could then take the
// agent's keys first.
const MinSecret = 16

// maxAgent bounds an agent's name.
const maxAgent = 128

// ErrWeakSecret is a secret shorter than MinSecret bytes.
var ErrWeakSecret = fmt.Errorf("agent secret: want at least %d bytes", MinSecret)

// NewKeys returns the keys of the agent named agent (empty: the secret
// alone names it; agents sharing a secret need names of their own) under
// secret, of at least MinSecret bytes.
func NewKeys(secret []byte, agent string) (*Keys, error) {
	if len(secret) < MinSecret {
		return nil, ErrWeakSecret
	}
	if len(agent) > maxAgent || !utf8.ValidString(agent) ||
		strings.IndexFunc(agent, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return nil, fmt.Errorf("agent name %q: want up to %d printable characters", agent, maxAgent)
	}
	return &Keys{secret: append([]byte(nil), secret...), agent: agent}, nil
}

// KeyPrefix starts every derived key ("ik1.": intent key, scheme 1), so
// that a key tells how it was made, and a random key (22 characters, no
// dot) is never mistaken for one.
const KeyPrefix = "ik1."

// Key is the key of the intent's version: KeyPrefix and the URL-safe
// base64 (unpadded) of HMAC-SHA256 under the secret of the RFC 8785 form
// of {"agent", "intent", "use": "idempotency-key", "version"}. The Python
// client computes the same.
func (k *Keys) Key(intent string, version int) string {
	return KeyPrefix + base64.RawURLEncoding.EncodeToString(k.mac(map[string]any{"agent": k.agent,
		"intent": intent, "use": "idempotency-key", "version": version}))
}

// mac is HMAC-SHA256 under the secret of doc's canonical form. doc holds
// only strings and integers, which always have one.
func (k *Keys) mac(doc map[string]any) []byte {
	b, err := fingerprint.Canonical(doc)
	if err != nil {
		panic(err) // a programming error: see above
	}
	m := hmac.New(sha256.New, k.secret)
	m.Write(b)
	return m.Sum(nil)
}

// sealLen is how many bytes of its MAC a sealed name carries: 96 bits,
// 16 characters, short enough for a model to copy, too many to guess.
const sealLen = 12

// SealSep joins a name to its seal.
const SealSep = "~"

// Seal is name with a MAC under the secret, "NAME~MAC": what idemgate mcp
// hands out, so that a name it made still proves itself once the journal
// that recorded it is lost, and a name it never made (a model's own, or
// a repeat "#2" typed by hand) does not.
func (k *Keys) Seal(name string) string {
	return name + SealSep + base64.RawURLEncoding.EncodeToString(k.nameMAC(name))
}

// Open returns the name a sealed one carries, and whether its seal is
// this agent's under this secret.
func (k *Keys) Open(sealed string) (string, bool) {
	i := strings.LastIndex(sealed, SealSep)
	if i < 0 {
		return "", false
	}
	mac, err := base64.RawURLEncoding.DecodeString(sealed[i+len(SealSep):])
	if err != nil || !hmac.Equal(mac, k.nameMAC(sealed[:i])) {
		return "", false
	}
	return sealed[:i], true
}

func (k *Keys) nameMAC(name string) []byte {
	return k.mac(map[string]any{"agent": k.agent, "intent": name, "use": "intent-name"})[:sealLen]
}

// Agent is the agent's name the keys are derived for.
func (k *Keys) Agent() string { return k.agent }

// String names the keys without their secret, so that printing a client
// never prints it.
func (k *Keys) String() string { return fmt.Sprintf("agent keys (agent %q, secret hidden)", k.agent) }

// GoString is String, for %#v.
func (k *Keys) GoString() string { return k.String() }

// keyFor is the key a new version of an intent is created with: derived
// when the client has Keys, else 128 random bits as before.
func (c *Client) keyFor(intent string, version int) string {
	if c.Keys == nil {
		return newKey()
	}
	return c.Keys.Key(intent, version)
}
