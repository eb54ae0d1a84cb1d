package fingerprint

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
)

// Prefix starts every request fingerprint, so the algorithm can change one
// day without old and new fingerprints ever comparing equal by accident.
const Prefix = "sha256:"

// Request is what a fingerprint covers: the method, the route template (not
// the concrete path, so /v1/tickets/{id} stays one route), the tenant, the
// validated command and the headers the route names. Everything else
// (tracing headers, the key itself, connection data) is left out by design.
type Request struct {
	Method  string
	Route   string
	Tenant  string
	Command any               // the parsed body, after validation; nil when there is none
	Headers map[string]string // only the headers the route names; names are case-insensitive
}

// Of returns the fingerprint of r: "sha256:" and the hex SHA-256 of the
// canonical JSON of {"method","route","tenant","command"[,"headers"]}.
func Of(r Request) (string, error) {
	if r.Method == "" || r.Route == "" || r.Tenant == "" {
		return "", errors.New("fingerprint: method, route and tenant are required")
	}
	doc := map[string]any{
		"method":  strings.ToUpper(r.Method),
		"route":   r.Route,
		"tenant":  r.Tenant,
		"command": r.Command,
	}
	if len(r.Headers) > 0 {
		h := make(map[string]any, len(r.Headers))
		for name, value := range r.Headers {
			lower := strings.ToLower(name)
			if _, dup := h[lower]; dup {
				return "", fmt.Errorf("fingerprint: header %q named twice", lower)
			}
			h[lower] = value
		}
		doc["headers"] = h
	}
	canon, err := Canonical(doc)
	if err != nil {
		return "", fmt.Errorf("fingerprint: %w", err)
	}
	sum := sha256.Sum256(canon)
	return Prefix + hex.EncodeToString(sum[:]), nil
}
