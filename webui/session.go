package webui

import (
	"crypto/sha256"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/approval"
)

// The cookies: the session's, and the sign-in form's own CSRF token (there
// is no session yet to tie that one to).
const (
	sessionCookie = "idemgate_ui"
	signinCookie  = "idemgate_ui_signin"
)

// maxSessions bounds the sessions kept in memory, and maxPerPrincipal
// each principal's share of them: a principal past its share ends its own
// oldest session, and never another's. A table full of other principals'
// live sessions refuses a newcomer (errSessionsFull) rather than signing
// anyone out: one principal signing in in a loop cannot sign out an
// approver (issue 24, 7.12).
const (
	maxSessions     = 10000
	maxPerPrincipal = 20
)

// errSessionsFull refuses a sign-in when every place is held by another
// principal's live session.
var errSessionsFull = errors.New("webui: every session place is taken by other principals")

// session is a signed-in principal. Its id lives only in the browser's
// cookie; the server keeps its SHA-256, so a copy of the server's memory
// holds no usable session.
type session struct {
	id        string // set only on the copy handed to the request that holds the cookie
	principal approval.Principal
	csrf      string
	created   time.Time
	seen      time.Time
	until     time.Time // the token's end, if it has one: the session's at the latest
}

// sessions is the in-memory session table. A restart signs everyone out,
// which is the safe way round for a page that approves deployments.
type sessions struct {
	mu        sync.Mutex
	m         map[[32]byte]*session
	owned     map[string][][32]byte // by principal (owner), oldest first
	ttl, idle time.Duration
	now       func() time.Time
	// max and perPrincipal are maxSessions and maxPerPrincipal; a test
	// makes them small.
	max, perPrincipal int
}

func newSessions(ttl, idle time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[[32]byte]*session{}, owned: map[string][][32]byte{}, ttl: ttl, idle: idle, now: now,
		max: maxSessions, perPrincipal: maxPerPrincipal}
}

// owner names a principal across tenants.
func owner(p approval.Principal) string { return p.Tenant + "\x00" + p.Name }

// create starts a session for p and returns its id. To make room it ends
// expired sessions, then p's own oldest, never another principal's.
func (s *sessions) create(p approval.Principal, until time.Time) (string, error) {
	id, now := randomText(), s.now()
	ss := &session{principal: p, csrf: randomText(), created: now, seen: now, until: until}
	s.mu.Lock()
	defer s.mu.Unlock()
	who := owner(p)
	if len(s.m) >= s.max {
		s.prune(now)
	}
	if mine := s.owned[who]; len(mine) >= s.perPrincipal || (len(s.m) >= s.max && len(mine) > 0) {
		s.drop(mine[0])
	}
	if len(s.m) >= s.max {
		return "", errSessionsFull
	}
	key := sha256.Sum256([]byte(id))
	s.m[key] = ss
	s.owned[who] = append(s.owned[who], key)
	return id, nil
}

// get returns a copy of the live session id names, and counts this use
// against its idle time. An expired one is ended.
func (s *sessions) get(id string) (*session, bool) {
	key, now := sha256.Sum256([]byte(id)), s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[key]
	if ss == nil {
		return nil, false
	}
	if s.expired(ss, now) {
		s.drop(key)
		return nil, false
	}
	ss.seen = now
	c := *ss
	c.id = id
	return &c, true
}

// end ends the session id names, if any.
func (s *sessions) end(id string) {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop(key)
}

// drop ends the session under key, in the table and in its principal's
// list. The caller holds mu.
func (s *sessions) drop(key [32]byte) {
	ss := s.m[key]
	if ss == nil {
		return
	}
	delete(s.m, key)
	who := owner(ss.principal)
	mine := slices.DeleteFunc(s.owned[who], func(k [32]byte) bool { return k == key })
	if len(mine) == 0 {
		delete(s.owned, who)
	} else {
		s.owned[who] = mine
	}
}

func (s *sessions) expired(ss *session, now time.Time) bool {
	return !now.Before(ss.created.Add(s.ttl)) || !now.Before(ss.seen.Add(s.idle)) ||
		!ss.until.IsZero() && !now.Before(ss.until)
}

// prune ends the expired sessions. The caller holds mu.
func (s *sessions) prune(now time.Time) {
	for k, ss := range s.m {
		if s.expired(ss, now) {
			s.drop(k)
		}
	}
}

// current returns the request's live session, or nil.
func (u *UI) current(r *http.Request) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil || c.Value == "" {
		return nil
	}
	s, _ := u.sessions.get(c.Value)
	return s
}

// cookie builds one of the page's cookies: never readable by scripts,
// never sent from another site, only under the prefix.
func (u *UI) cookie(name, value string, maxAge time.Duration) *http.Cookie {
	return &http.Cookie{Name: name, Value: value, Path: u.opts.Prefix, MaxAge: int(maxAge / time.Second),
		HttpOnly: true, Secure: u.opts.Secure, SameSite: http.SameSiteStrictMode}
}

// signinPage shows the sign-in form with a fresh form token in a cookie of
// its own.
func (u *UI) signinPage(w http.ResponseWriter, r *http.Request) {
	if u.current(r) != nil {
		u.redirect(w, r, "")
		return
	}
	u.showSignin(w, r, http.StatusOK, "")
}

func (u *UI) showSignin(w http.ResponseWriter, r *http.Request, status int, problem string) {
	token := randomText()
	http.SetCookie(w, u.cookie(signinCookie, token, 15*time.Minute))
	data := signinData{Next: u.safeNext(r.FormValue("next")), SignedOut: r.URL.Query().Has("signed-out")}
	pg := &page{Title: "Sign in", CSRF: token, Body: data}
	if problem != "" {
		pg.Problem = &problemView{Title: "Not signed in", Detail: problem}
	}
	u.render(w, r, status, "signin", pg)
}

// signinData is what the sign-in form shows.
type signinData struct {
	Next      string
	SignedOut bool
}

// signin turns a principal's token into a session. The token is read
// from the form's body and never written anywhere: not in a log, not in a
// page (the form comes back empty), not in a URL.
func (u *UI) signin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	c, err := r.Cookie(signinCookie)
	if err != nil || !sameToken(c.Value, r.PostFormValue("csrf")) {
		u.fail(w, r, nil, http.StatusForbidden, "Refused", "The sign-in form had expired. Open it again and sign in.")
		return
	}
	p, until, ok := u.opts.Authenticate(r, strings.TrimSpace(r.PostFormValue("token")))
	if !ok || p.Name == "" || p.Tenant == "" {
		// A known token is never refused for others' failures; an unknown
		// one past its address's budget is answered 429, and logged no more.
		if wait, within := u.failures.Fail(r.RemoteAddr); !within {
			w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(wait.Seconds()))))
			u.showSignin(w, r, http.StatusTooManyRequests, "Too many failed sign-ins from this address. Wait a "+
				"few seconds and try again.")
			return
		}
		u.opts.Logger.Warn("ui sign-in refused", slog.String("remote", r.RemoteAddr))
		u.showSignin(w, r, http.StatusUnauthorized, "That token is not known here.")
		return
	}
	if old, err := r.Cookie(sessionCookie); err == nil {
		u.sessions.end(old.Value) // a new session id at every sign-in: no fixation
	}
	id, err := u.sessions.create(p, until)
	if err != nil {
		u.opts.Logger.Warn("ui sign-in refused: the session table is full", slog.String("principal", p.Name))
		u.showSignin(w, r, http.StatusServiceUnavailable, "Too many people are signed in here just now. Try again in a few minutes.")
		return
	}
	http.SetCookie(w, u.cookie(sessionCookie, id, u.opts.SessionTTL))
	http.SetCookie(w, u.cookie(signinCookie, "", -time.Second))
	u.opts.Logger.Info("ui sign-in", slog.String("principal", p.Name), slog.String("tenant", p.Tenant))
	next := u.safeNext(r.PostFormValue("next"))
	if next == "" {
		next = u.opts.Prefix
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// signout ends the session, here and in the browser.
func (u *UI) signout(w http.ResponseWriter, r *http.Request, s *session) {
	u.sessions.end(s.id)
	http.SetCookie(w, u.cookie(sessionCookie, "", -time.Second))
	u.opts.Logger.Info("ui sign-out", slog.String("principal", s.principal.Name), slog.String("tenant", s.principal.Tenant))
	http.Redirect(w, r, u.opts.Prefix+"signin?signed-out", http.StatusSeeOther)
}

// safeNext keeps a page to return to after sign-in only if it is one of
// this page's own paths: never another site (an open redirect).
func (u *UI) safeNext(next string) string {
	if next == "" || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return ""
	}
	v, err := url.Parse(next)
	if err != nil || v.Scheme != "" || v.Host != "" || !strings.HasPrefix(v.Path, u.opts.Prefix) ||
		strings.Contains(v.Path, "/../") || v.Path == u.opts.Prefix+"signin" {
		return ""
	}
	return v.RequestURI()
}

// signedIn serves h to a request with a live session. A page asked for
// without one sends the browser to sign in (and back); a form posted
// without one, or without the session's CSRF token, is refused.
func (u *UI) signedIn(h func(w http.ResponseWriter, r *http.Request, s *session)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := u.current(r)
		if r.Method != http.MethodPost {
			if s == nil {
				http.Redirect(w, r, u.opts.Prefix+"signin?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
				return
			}
			h(w, r, s)
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		switch {
		case s == nil:
			u.fail(w, r, nil, http.StatusForbidden, "Signed out", "Your session has ended. Sign in again; nothing was changed.")
		case !sameToken(s.csrf, r.PostFormValue("csrf")):
			u.fail(w, r, s, http.StatusForbidden, "Refused", "This form is not from your session. Reload the page and try again; nothing was changed.")
		default:
			h(w, r, s)
		}
	})
}

// maxForm bounds a posted form: a resolution may carry the upstream's
// answer, up to a stored response's usual bound.
const maxForm = 2 << 20
