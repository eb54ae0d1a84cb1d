package webui

import (
	"regexp"
	"strings"

	"github.com/idemgate/idemgate/ledger"
)

// sent is what the page knows of the request an operation sent. The
// store keeps no request body (it may hold personal data, and it would
// weigh on every write): an approval's command, shown whole when there
// is one; else the values it keeps of the body (business identity,
// concurrency group), the path parameters read off the target, the
// probe, and the command line that checks a body found elsewhere against
// the fingerprint.
type sent struct {
	Params []field // path parameters: Pointer is the name
	Check  string  // "idemgate fingerprint …", "" for an action
	Known  bool    // any fact beyond the target
}

// sentOf is what op's page can say of its request.
func sentOf(op *ledger.Operation) *sent {
	s := &sent{Params: pathParams(op.Route, op.Target)}
	method, tmpl, ok := strings.Cut(op.Route, " ")
	if ok && strings.HasPrefix(tmpl, "/") {
		args := []string{"idemgate fingerprint --method", quote(method), "--route", quote(tmpl), "--tenant", quote(op.Tenant)}
		for _, p := range s.Params {
			args = append(args, "--param", quote(p.Pointer+"="+p.Value))
		}
		s.Check = strings.Join(args, " ")
	}
	s.Known = len(s.Params) > 0 || op.BusinessKey != "" || op.ConcurrencyKey != "" || op.Probe != ""
	return s
}

// pathParams reads the values of route's parameters off target: route
// "POST /v1/payment-intents/{id}/capture" and target "POST
// /v1/payment-intents/pi_7/capture" give id = pi_7. A target that does
// not fit the route gives none.
func pathParams(route, target string) []field {
	rs, ts := strings.Split(route, "/"), strings.Split(target, "/")
	var out []field
	for i, seg := range rs {
		if i >= len(ts) {
			return nil
		}
		name, isParam := paramName(seg)
		switch {
		case name == "$": // {$}: the path ends here
		case !isParam && seg != ts[i]:
			return nil
		case !isParam:
		case strings.HasSuffix(name, "..."):
			return append(out, field{Pointer: strings.TrimSuffix(name, "..."), Value: strings.Join(ts[i:], "/")})
		default:
			out = append(out, field{Pointer: name, Value: ts[i]})
		}
	}
	if len(rs) != len(ts) {
		return nil
	}
	return out
}

// paramName is the name of a pattern's wildcard segment ("{id}" is id).
func paramName(seg string) (string, bool) {
	if len(seg) > 2 && seg[0] == '{' && seg[len(seg)-1] == '}' {
		return seg[1 : len(seg)-1], true
	}
	return "", false
}

// bare is what a shell reads as one word as it is.
var bare = regexp.MustCompile(`^[A-Za-z0-9_./:=@%+,-]+$`)

// quote writes s as one shell word.
func quote(s string) string {
	if bare.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
