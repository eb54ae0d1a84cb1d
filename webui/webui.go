// Package webui is the approvers' and operators' web page (docs/design.md, "The
// web page"): sign-in with a principal's token into a server-side session,
// the approvals inbox and its decisions, the operations explorer, an
// operation's timeline with its audit proofs, an admin's resolution of an
// unknown operation, and a dashboard of the metrics history.
//
// It is server-rendered (html/template, embedded files, one small CSS file
// and one small script), so that nothing needs a build step and every value
// from a request or a store is escaped by the template engine. Every
// decision and resolution is the control plane's Operator's, as the
// control API's are: one role check, one set of rules, one error map.
package webui

import (
	"context"
	"embed"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/control"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/limits"
)

//go:embed templates/*.html static/*
var files embed.FS

// Options configure the web page. Store, Operator and Authenticate are
// required.
type Options struct {
	// Store is what the page reads beyond the Operator's records.
	Store Store
	// Operator makes every decision and resolution, as the control API's
	// do (package control: the same checks, the same hooks), and decides
	// who is an admin.
	Operator *control.Operator
	// Authenticate finds the principal whose token this is, signing in on
	// r (whose connection may carry the client certificate a principal is
	// bound to), until when the token is valid (zero: no end of its own;
	// a session made from it ends then at the latest), and what
	// authenticated it (SignIn). The gateway's
	// lookup compares the token's SHA-256 with every principal's in
	// constant time, or verifies a JWT; the page never keeps the token,
	// only the session.
	Authenticate func(r *http.Request, token string) (SignIn, bool)
	// Prefix is where the page is mounted (default "/ui/"); it must start
	// and end with "/". The session cookie's Path is the prefix.
	Prefix string
	// Secure marks the session cookie Secure: set it when the page is
	// served over TLS.
	Secure bool
	// Sessions is the session table; nil makes one for this page. A
	// server that builds its page again on a reload gives it the same
	// table, so that the reload signs nobody out it leaves unchanged
	// (Sessions.Retain).
	Sessions *Sessions
	// SessionTTL bounds a session's life from sign-in (default 8h);
	// SessionIdle ends one unused for that long (default 30m).
	SessionTTL  time.Duration
	SessionIdle time.Duration
	// MaxSessions bounds the sessions held (default 10,000),
	// MaxSessionsPerTenant one tenant's share of them (default a quarter
	// of MaxSessions), MaxSessionsPerPrincipal one principal's (default
	// 20). A sign-in with no place is refused (503, saying which bound
	// and which setting), never made by signing another principal out.
	MaxSessions, MaxSessionsPerTenant, MaxSessionsPerPrincipal int
	// ApproverRoles are the roles that see the inbox (default
	// approval.DefaultApprovers). Admins see it too. Each approval still
	// names the roles that may decide it.
	ApproverRoles []string
	// NearExpiry marks a pending approval as stuck when less than this is
	// left of it (default 5m).
	NearExpiry time.Duration
	// TrustedOrigins are origins, besides the page's own, whose form posts
	// are accepted ("https://gw.example.com"): for a proxy that rewrites
	// the Host header.
	TrustedOrigins []string
	// Amounts are the members of each route's command ("POST
	// /v1/refunds", "action:NAME") that its schema marks as minor units of
	// a currency (AmountsOf): the page shows them formatted.
	Amounts map[string][]Amount
	// Series is the metrics history the dashboard charts; nil shows "no
	// data yet".
	Series Series
	// Failures limits failed sign-ins per client address, shared with
	// the APIs' bearer tokens (default: the page's own).
	Failures *limits.Failures
	// Now is the clock for sessions and countdowns (default time.Now).
	Now    func() time.Time
	Logger *slog.Logger
}

// Store is what the page reads itself: lists of operations and
// approvals, an operation's history and effects, and the audit proofs of
// its timeline. A ledger.Store is one.
type Store interface {
	List(ctx context.Context, p ledger.ListParams) (ledger.Page, error)
	ListApprovals(ctx context.Context, p ledger.ApprovalListParams) (ledger.ApprovalPage, error)
	History(ctx context.Context, id string) ([]ledger.Event, error)
	Effects(ctx context.Context, tenant, operationKey string) ([]*ledger.Effect, error)
	ledger.AuditProofReader
}

// UI is the web page's handler.
type UI struct {
	opts     Options
	mux      *http.ServeMux
	sessions *Sessions
	pages    map[string]*template.Template
	cop      *http.CrossOriginProtection
	failures *limits.Failures // failed sign-ins, per client address
}

// New checks opts and builds the page's handler, to be mounted at
// opts.Prefix.
func New(opts Options) (*UI, error) {
	if opts.Store == nil || opts.Operator == nil || opts.Authenticate == nil {
		return nil, errors.New("webui: Store, Operator and Authenticate are required")
	}
	setDefaults(&opts)
	if !strings.HasPrefix(opts.Prefix, "/") || !strings.HasSuffix(opts.Prefix, "/") {
		return nil, errors.New("webui: prefix must start and end with /")
	}
	u := &UI{opts: opts}
	pages, err := u.parsePages()
	if err != nil {
		return nil, err
	}
	u.pages, u.cop = pages, http.NewCrossOriginProtection()
	u.sessions = opts.Sessions
	if u.sessions == nil {
		u.sessions = NewSessions()
	}
	u.sessions.configure(opts)
	u.failures = opts.Failures
	for _, o := range opts.TrustedOrigins {
		if err := u.cop.AddTrustedOrigin(o); err != nil {
			return nil, errors.New("webui: trusted origin: " + err.Error())
		}
	}
	u.routes()
	return u, nil
}

func setDefaults(o *Options) {
	if o.Prefix == "" {
		o.Prefix = "/ui/"
	}
	if o.Failures == nil {
		// Tokens are long random secrets; this only keeps a guesser from
		// using the page as a fast oracle, at little cost to a person.
		o.Failures = limits.NewFailures(200*time.Millisecond, 20)
	}
	if o.SessionTTL <= 0 {
		o.SessionTTL = 8 * time.Hour
	}
	if o.SessionIdle <= 0 {
		o.SessionIdle = 30 * time.Minute
	}
	if len(o.ApproverRoles) == 0 {
		o.ApproverRoles = slices.Clone(approval.DefaultApprovers)
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = maxSessions
	}
	if o.MaxSessionsPerPrincipal <= 0 {
		o.MaxSessionsPerPrincipal = maxPerPrincipal
	}
	if o.NearExpiry <= 0 {
		o.NearExpiry = 5 * time.Minute
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
}

// routes registers every page. Pages that need a principal are wrapped by
// signedIn; every POST goes through the origin check and the CSRF check.
func (u *UI) routes() {
	p := u.opts.Prefix
	mux := http.NewServeMux()
	static, _ := fs.Sub(files, "static")
	mux.Handle("GET "+p+"static/", http.StripPrefix(p+"static/", http.FileServerFS(static)))
	mux.HandleFunc("GET "+p+"{$}", u.home)
	mux.HandleFunc("GET "+p+"signin", u.signinPage)
	mux.HandleFunc("POST "+p+"signin", u.signin)
	mux.Handle("POST "+p+"signout", u.signedIn(u.signout))
	mux.Handle("GET "+p+"inbox", u.signedIn(u.inbox))
	mux.Handle("GET "+p+"approvals/{id}", u.signedIn(u.approvalPage))
	mux.Handle("POST "+p+"approvals/{id}/confirm", u.signedIn(u.confirm))
	mux.Handle("POST "+p+"approvals/{id}/decide", u.signedIn(u.decide))
	mux.Handle("GET "+p+"operations", u.signedIn(u.operations))
	mux.Handle("GET "+p+"operations/{id}", u.signedIn(u.operationPage))
	mux.Handle("POST "+p+"operations/{id}/resolve", u.signedIn(u.resolve))
	mux.Handle("GET "+p+"dashboard", u.signedIn(u.dashboard))
	mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
		u.fail(w, r, u.current(r), http.StatusNotFound, "Not found", "There is no such page.")
	})
	u.mux = mux
}

// ServeHTTP serves the page with its security headers: no framing, no
// referrer, no inline script or style, nothing cached.
func (u *UI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "+
		"form-action 'self'; frame-ancestors 'none'; base-uri 'none'; object-src 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cache-Control", "no-store")
	if err := u.cop.Check(r); err != nil {
		u.fail(w, r, nil, http.StatusForbidden, "Refused", "This form was sent from another site. Open the page and try again.")
		return
	}
	u.mux.ServeHTTP(w, r)
}

// Icon serves the page's icon, for a server to mount at /favicon.ico:
// a browser asks there for any page that names none (an API's error
// page, a bookmark), and a 401 would be an error in every console.
func (u *UI) Icon() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/svg+xml")
		w.Header().Set("Cache-Control", "public, max-age=86400")
		http.ServeFileFS(w, r, files, "static/favicon.svg")
	})
}

// home sends a person where they work: approvers to the inbox, everyone
// else to the operations.
func (u *UI) home(w http.ResponseWriter, r *http.Request) {
	s := u.current(r)
	switch {
	case s == nil:
		u.redirect(w, r, "signin")
	case u.seesInbox(s.principal):
		u.redirect(w, r, "inbox")
	default:
		u.redirect(w, r, "operations")
	}
}

// redirect answers 303 See Other to a page under the prefix.
func (u *UI) redirect(w http.ResponseWriter, r *http.Request, page string) {
	http.Redirect(w, r, u.opts.Prefix+page, http.StatusSeeOther)
}

// seesInbox reports whether p may open the inbox.
func (u *UI) seesInbox(p approval.Principal) bool {
	return u.isAdmin(p) || slices.ContainsFunc(u.opts.ApproverRoles, func(r string) bool { return slices.Contains(p.Roles, r) })
}

// isAdmin reports whether p may resolve operations (the Operator's rule,
// the control API's).
func (u *UI) isAdmin(p approval.Principal) bool { return u.opts.Operator.IsAdmin(control.Of(p)) }
