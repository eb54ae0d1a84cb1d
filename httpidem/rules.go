package httpidem

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemgate/idemgate/internal/jsonptr"
)

// rules are a route's settings that change its fingerprints: the named
// headers, the ignored members and query parameters, an opaque body. An
// operation keeps the rules it was made under (ledger.Operation's
// FingerprintRules), so that a retry after a reload that changed them is
// fingerprinted again under those, and an answered key still replays
// (docs/design.md, "Fingerprint rules"). A schema's defaults are not among
// them: a retry is validated by the schema in force.
type rules struct {
	Headers     []string `json:"headers,omitempty"`
	Ignore      []string `json:"ignore,omitempty"`
	IgnoreQuery []string `json:"ignore_query,omitempty"`
	Opaque      bool     `json:"opaque,omitempty"`
}

// text is the rules as an operation keeps them: "{}" for the defaults
// (an operation of before this record has none, and is refused as it
// always was when its command's fingerprint differs).
func (r rules) text() string {
	b, _ := json.Marshal(r)
	return string(b)
}

// rulesOf are a route's rules.
func rulesOf(r Route) rules {
	return rules{Headers: r.Headers, Ignore: r.Ignore, IgnoreQuery: r.IgnoreQuery, Opaque: r.Opaque}
}

// refingerprint is req's fingerprint under rules an operation was made
// under (its text): req read again as its route would have read it then.
func (m *Middleware) refingerprint(r *http.Request, req *request, text string) (string, error) {
	var was rules
	if err := json.Unmarshal([]byte(text), &was); err != nil {
		return "", fmt.Errorf("the operation's fingerprint rules: %w", err)
	}
	rt := *req.route
	rt.Headers, rt.IgnoreQuery, rt.Opaque, rt.ignore = was.Headers, was.IgnoreQuery, was.Opaque, nil
	for _, p := range was.Ignore {
		toks, err := jsonptr.Parse(p)
		if err != nil || len(toks) == 0 {
			return "", fmt.Errorf("the operation's fingerprint rules: ignore %q", p)
		}
		rt.ignore = append(rt.ignore, toks)
	}
	then := &request{route: &rt, tenant: req.tenant, key: req.key, body: req.body, header: req.header}
	if p := then.parseCommand(r); p != nil {
		return "", errors.New(p.Detail)
	}
	if p := then.fingerprintOf(r); p != nil {
		return "", errors.New(p.Detail)
	}
	return then.fingerprint, nil
}
