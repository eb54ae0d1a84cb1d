package httpidem

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/jsonptr"
	"github.com/idemgate/idemgate/internal/resultref"
	"github.com/idemgate/idemgate/keyed"
	"github.com/idemgate/idemgate/ledger"
)

// Route is one idempotent write: a method and a path template in
// net/http's pattern syntax ("/v1/tickets/{id}"), and its policies. Zero
// fields take the middleware's defaults.
type Route struct {
	Method  string
	Pattern string
	// RequireKey defaults to true for POST and PATCH, false otherwise; a
	// keyless request to a route that does not require one passes through
	// unrecorded.
	RequireKey *bool
	// KeyFrom takes the key from elsewhere: "header:X-Delivery-Id" or
	// "body:/event_id" (webhooks, alerts). Default: Idempotency-Key.
	KeyFrom string
	// Headers are fingerprinted with the body; Ignore lists JSON Pointers
	// removed from the command before it is fingerprinted; IgnoreQuery
	// lists query parameters left out of it (utm_source and its kin).
	Headers     []string
	Ignore      []string
	IgnoreQuery []string
	// Opaque fingerprints the body as its bytes and media type, whatever
	// the type, for routes whose bodies are neither JSON nor forms.
	Opaque bool
	// Validate checks the command and may return it changed (schema
	// defaults applied) before it is fingerprinted; an error is 422
	// invalid_command and nothing is reserved.
	Validate func(command any) (any, error)
	// BusinessKey and ConcurrencyKey are JSON Pointers into the command.
	BusinessKey, ConcurrencyKey string
	// DigestKey makes the body's SHA-256, as received, the business key
	// instead ("sha256:<hex>"): one operation per body across keys, for a
	// sender that signs its body but not its delivery id (a GitHub
	// webhook), so that a replayed signed body under a fresh id makes no
	// second effect.
	DigestKey bool
	// Classify maps the handler's status to the operation's fate; default
	// contract.DefaultClassify. A handler may instead Settle it (see Execution).
	Classify func(status int) contract.Fate
	// Approval, if set, asks a human before the effect of every request
	// its policy's `when` holds for (docs/design.md, "Approvals").
	Approval *approval.Policy
	// Resend allows running an unknown operation again, for upstreams that
	// honour the key (they deduplicate the re-sent request themselves).
	Resend bool
	// Probe, if set, renders the route's reconciliation probe for a write
	// from its path parameters, query and command (docs/design.md,
	// "Reconciliation"); it is kept on the operation at its reservation.
	Probe func(params map[string]string, query map[string][]string, command any) (string, error)
	// ResultRef names where the upstream's answer holds its reference for
	// the effect: "body:/id" (a JSON Pointer) or "header:X-Request-Id". It
	// is stored on the operation and in its audit events.
	ResultRef string
	// Action, if set, makes the route an action's reservation
	// (docs/design.md, "Actions"): an effect the caller performs itself.
	// The body is the command, read as JSON whatever its media type, and
	// fingerprinted with the action's name and the tenant only
	// (fingerprint.OfAction); the operation's route is
	// contract.ActionRoute(Action). Where the middleware would run its
	// handler, it hands the caller the lease instead (201, contract.ActionGrant)
	// and the operation stays executing until the caller's owner steps
	// (package control) end it; a final one replays its recorded result
	// (contract.ActionReplay). The method must be POST.
	Action string
	// Kind and Namespace are the operations' (default: a route's, in the
	// tenant's clients' namespace; a signed webhook route's are its own,
	// ledger.WebhookNamespace).
	Kind      ledger.Kind
	Namespace string
	Lease     time.Duration
	Retention time.Duration
	MaxBody   int64
}

// route is a Route ready to serve.
type route struct {
	Route
	template   string // the fingerprinted route: Pattern
	name       string // the operation's route: "METHOD template", or "action:NAME"
	namespace  string
	policy     keyed.Policy // what the executor asks of its operations
	rules      string       // its fingerprint rules, as an operation keeps them
	params     []param
	keyHeader  string
	keyPointer []string
	ignore     [][]string
	business   []string
	concurrent []string
	requireKey bool
	resultRef  resultref.Reader
}

func compileRoute(r Route, o *Options) (*route, error) {
	if r.Method == "" || !strings.HasPrefix(r.Pattern, "/") {
		return nil, fmt.Errorf("route %q %q: want a method and a path starting with /", r.Method, r.Pattern)
	}
	c := &route{Route: r, template: r.Pattern, keyHeader: contract.HeaderKey, params: patternParams(r.Pattern)}
	c.Method = strings.ToUpper(r.Method)
	c.requireKey = c.Method == http.MethodPost || c.Method == http.MethodPatch
	if r.RequireKey != nil {
		c.requireKey = *r.RequireKey
	}
	if r.Approval != nil {
		// A keyless request would pass through unrecorded, and so unapproved.
		if r.RequireKey != nil && !*r.RequireKey {
			return nil, fmt.Errorf("route %s %s asks for approvals: it cannot do without a key", c.Method, c.Pattern)
		}
		c.requireKey = true
	}
	c.name, c.namespace, c.rules = c.Method+" "+c.template, r.Namespace, rulesOf(r).text()
	if c.namespace == "" {
		c.namespace = ledger.NamespaceClients
	}
	if c.Kind == "" {
		c.Kind = ledger.KindRoute
	}
	if r.Action != "" {
		if err := c.compileAction(); err != nil {
			return nil, err
		}
	}
	if !c.Kind.Valid() || !ledger.Holdable(c.namespace) || len(c.namespace) > ledger.MaxNamespaceLen {
		return nil, fmt.Errorf("route %s %s: kind %q, namespace %q: want one of %v, and 1 to %d bytes of UTF-8",
			c.Method, c.Pattern, c.Kind, c.namespace, ledger.Kinds, ledger.MaxNamespaceLen)
	}
	if err := c.compileKeyFrom(); err != nil {
		return nil, err
	}
	var err error
	if c.resultRef, err = resultref.Compile(r.ResultRef); err != nil {
		return nil, fmt.Errorf("route %s %s: %w", c.Method, c.Pattern, err)
	}
	for _, p := range r.Ignore {
		toks, perr := jsonptr.Parse(p)
		if perr != nil || len(toks) == 0 {
			return nil, fmt.Errorf("route %s %s: fingerprint.ignore %q: %v", c.Method, c.Pattern, p, perr)
		}
		c.ignore = append(c.ignore, toks)
	}
	if r.DigestKey && r.BusinessKey != "" {
		return nil, fmt.Errorf("route %s %s: a business key and the body's digest: name one", c.Method, c.Pattern)
	}
	if c.business, err = jsonptr.Parse(r.BusinessKey); err != nil {
		return nil, err
	}
	if c.concurrent, err = jsonptr.Parse(r.ConcurrencyKey); err != nil {
		return nil, err
	}
	c.defaults(o)
	return c, nil
}

// compileAction checks an action's route: a POST, keyed by its
// Idempotency-Key, whose body is JSON.
func (c *route) compileAction() error {
	switch {
	case !contract.ValidActionName(c.Action):
		return fmt.Errorf("action %q: want a name of [a-z0-9._-], starting with a letter or digit, at most 128", c.Action)
	case c.Method != http.MethodPost || c.KeyFrom != "" || c.Opaque || len(c.Headers) > 0:
		return fmt.Errorf("action %s: a POST keyed by %s, with a JSON body and no headers fingerprinted", c.Action, contract.HeaderKey)
	case c.RequireKey != nil && !*c.RequireKey:
		return fmt.Errorf("action %s: an action always requires a key", c.Action)
	}
	c.name, c.requireKey, c.Kind = contract.ActionRoute(c.Action), true, ledger.KindAction
	return nil
}

func (c *route) compileKeyFrom() error {
	switch kind, ref, _ := strings.Cut(c.KeyFrom, ":"); kind {
	case "":
	case "header":
		if ref == "" {
			return fmt.Errorf("route %s %s: key_from header: needs a name", c.Method, c.Pattern)
		}
		c.keyHeader = http.CanonicalHeaderKey(ref)
	case "body":
		toks, err := jsonptr.Parse(ref)
		if err != nil || len(toks) == 0 {
			return fmt.Errorf("route %s %s: key_from %q: want body:/pointer", c.Method, c.Pattern, c.KeyFrom)
		}
		c.keyHeader, c.keyPointer = "", toks
	default:
		return fmt.Errorf("route %s %s: key_from %q: want header:NAME or body:/pointer", c.Method, c.Pattern, c.KeyFrom)
	}
	return nil
}

func (c *route) defaults(o *Options) {
	if c.Classify == nil {
		c.Classify = contract.DefaultClassify
	}
	if c.Lease <= 0 {
		c.Lease = o.Lease
	}
	if c.Retention <= 0 {
		c.Retention = o.Retention
	}
	if c.MaxBody <= 0 {
		c.MaxBody = o.MaxBody
	}
	if c.Lease < ledger.MinDuration {
		c.Lease = keyed.DefaultLease
	}
	c.policy = keyed.Policy{Name: c.name, Kind: c.Kind, Lease: c.Lease, Retention: c.Retention, Resend: c.Resend,
		Approval: c.Approval, MaxAnswer: o.MaxResponse}
}

// router finds the route of a request with net/http's own pattern matching.
type router struct {
	mux    *http.ServeMux
	routes map[string]*route // by "METHOD pattern"
}

type marker struct{}

func (marker) ServeHTTP(http.ResponseWriter, *http.Request) {}

func newRouter(routes []*route) (rt *router, err error) {
	rt = &router{mux: http.NewServeMux(), routes: map[string]*route{}}
	defer func() {
		if p := recover(); p != nil { // ServeMux panics on conflicting patterns
			rt, err = nil, fmt.Errorf("routes: %v", p)
		}
	}()
	for _, r := range routes {
		pattern := r.Method + " " + r.Pattern
		rt.mux.Handle(pattern, marker{})
		rt.routes[pattern] = r
	}
	return rt, nil
}

func (rt *router) match(r *http.Request) *route {
	h, pattern := rt.mux.Handler(r)
	if _, ok := h.(marker); !ok {
		return nil
	}
	return rt.routes[pattern]
}

// param is a wildcard of a route's pattern: its segment and its name.
type param struct {
	segment int
	name    string
	rest    bool // {name...}: the rest of the path
}

// patternParams lists the wildcards of a net/http pattern's path.
func patternParams(pattern string) []param {
	var out []param
	for i, seg := range strings.Split(strings.TrimPrefix(pattern, "/"), "/") {
		if !strings.HasPrefix(seg, "{") || !strings.HasSuffix(seg, "}") || seg == "{$}" {
			continue
		}
		name, rest := strings.CutSuffix(seg[1:len(seg)-1], "...")
		out = append(out, param{segment: i, name: name, rest: rest})
	}
	return out
}

// pathParams returns the values of rt's wildcards in r's path, as net/http
// matches them: segment by segment on the escaped path, each segment
// unescaped. The rest of a path ({name...}) is kept as sent, escapes and
// all, since an upstream may read a%2Fb and a/b apart.
func (rt *route) pathParams(r *http.Request) (map[string]string, error) {
	if len(rt.params) == 0 {
		return nil, nil
	}
	segs := strings.Split(strings.TrimPrefix(r.URL.EscapedPath(), "/"), "/")
	out := make(map[string]string, len(rt.params))
	for _, p := range rt.params {
		if p.segment >= len(segs) {
			out[p.name] = ""
			continue
		}
		if p.rest {
			out[p.name] = strings.Join(segs[p.segment:], "/")
			continue
		}
		v, err := url.PathUnescape(segs[p.segment])
		if err != nil {
			return nil, fmt.Errorf("path parameter %s: %w", p.name, err)
		}
		out[p.name] = v
	}
	return out, nil
}

// query returns r's query as name → values, in order, without the names
// the route ignores. A query that does not parse is refused: the upstream
// might read it otherwise than the fingerprint would.
func (rt *route) query(r *http.Request) (map[string][]string, error) {
	if r.URL.RawQuery == "" {
		return nil, nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, fmt.Errorf("query string: %w", err)
	}
	for _, name := range rt.IgnoreQuery {
		delete(q, name)
	}
	return q, nil
}
