package webui

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// The cookies: the session's, and the sign-in form's own CSRF token (there
// is no session yet to tie that one to).
const (
	sessionCookie = "idemgate_ui"
	signinCookie  = "idemgate_ui_signin"
)

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
	in, ok := u.opts.Authenticate(r, strings.TrimSpace(r.PostFormValue("token")))
	p := in.Principal
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
	id, err := u.sessions.start(in)
	if errors.Is(err, errChanged) {
		u.showSignin(w, r, http.StatusConflict, "The gateway's configuration changed as you signed in. Sign in again.")
		return
	}
	if err != nil {
		why, setting := u.sessions.full(p.Tenant, err)
		u.opts.Logger.Warn("ui sign-in refused: no session place", slog.String("principal", p.Name),
			slog.String("tenant", p.Tenant), slog.String("why", why), slog.String("setting", setting))
		u.showSignin(w, r, http.StatusServiceUnavailable, fmt.Sprintf("Too many people are signed in here just now: %s "+
			"(the gateway's %s). Try again once some have signed out or been idle for %s (ui.session_idle); the "+
			"gateway's operator can raise %s.", why, setting, u.opts.SessionIdle, setting))
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
