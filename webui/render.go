package webui

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/ledger"
)

// pageNames are the templates under templates/, each rendered inside
// layout.html with the shared parts of parts.html.
var pageNames = []string{"signin", "error", "inbox", "approval", "confirm", "operations", "operation", "dashboard"}

// page is what every template is given.
type page struct {
	Name    string // the template's, on the body as data-page: what the browser tests know a page by
	Title   string
	Prefix  string
	Nav     string // the menu entry that is current
	Me      *me    // nil when signed out
	CSRF    string // the token every form of the page carries
	Problem *problemView
	Notice  string
	Body    any
}

// me is the signed-in principal as the menu needs it.
type me struct {
	Name, Tenant string
	Roles        []string
	Inbox, Admin bool
}

// problemView is an error a page shows, with a way back.
type problemView struct {
	Title, Detail string
	Back          string // a path to go back to, or ""
}

// parsedPages are the templates, parsed once per process: a UI clones
// them and binds its own functions (its prefix, its clock). Parsing them
// was most of what making a gateway cost, which a reload and every test
// that starts one pay.
var parsedPages = sync.OnceValues(func() (map[string]*template.Template, error) {
	out := map[string]*template.Template{}
	for _, name := range pageNames {
		t, err := template.New("layout.html").Funcs(pageFuncs(nil)).ParseFS(files,
			"templates/layout.html", "templates/parts.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("webui: template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
})

// pageFuncs are the functions the templates call; those that need the
// UI's prefix or clock are u's (parsing only needs their names: u nil).
func pageFuncs(u *UI) template.FuncMap {
	return template.FuncMap{
		"when": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05 UTC")
		},
		"iso":    func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"minute": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") },
		"show":   func(s string) string { return show(s) },
		"clip":   clip,
		"prefix": func() string { return u.opts.Prefix },
		"json":   showJSON,
		"left":   func(t time.Time) string { return remaining(t.Sub(u.opts.Now())) },
		"ago":    func(t time.Time) string { return ago(u.opts.Now().Sub(t)) },
	}
}

// parsePages is u's copy of every page, bound to its functions.
func (u *UI) parsePages() (map[string]*template.Template, error) {
	parsed, err := parsedPages()
	if err != nil {
		return nil, err
	}
	funcs := pageFuncs(u)
	out := make(map[string]*template.Template, len(parsed))
	for name, t := range parsed {
		c, err := t.Clone()
		if err != nil {
			return nil, fmt.Errorf("webui: template %s: %w", name, err)
		}
		out[name] = c.Funcs(funcs)
	}
	return out, nil
}

// page starts the data of a page for session s.
func (u *UI) page(s *session, nav, title string, body any) *page {
	p := &page{Title: title, Nav: nav, Body: body}
	if s != nil {
		pr := s.principal
		p.Me = &me{Name: pr.Name, Tenant: pr.Tenant, Roles: pr.Roles, Inbox: u.seesInbox(pr), Admin: u.isAdmin(pr)}
		p.CSRF = s.csrf
	}
	return p
}

// render writes a whole page, or a bare 500 if the template fails (a page
// half written with a 200 would be worse).
func (u *UI) render(w http.ResponseWriter, r *http.Request, status int, name string, p *page) {
	p.Prefix, p.Name = u.opts.Prefix, name
	var buf bytes.Buffer
	if err := u.pages[name].Execute(&buf, p); err != nil {
		u.opts.Logger.Error("ui template", slog.String("page", name), slog.String("error", err.Error()))
		http.Error(w, "the page could not be drawn", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// fail shows an error page.
func (u *UI) fail(w http.ResponseWriter, r *http.Request, s *session, status int, title, detail string) {
	u.failBack(w, r, s, status, &problemView{Title: title, Detail: detail})
}

func (u *UI) failBack(w http.ResponseWriter, r *http.Request, s *session, status int, pv *problemView) {
	p := u.page(s, "", pv.Title, nil)
	p.Problem = pv
	u.render(w, r, status, "error", p)
}

// storeFail shows what a refusal means to the person who asked, with
// back as the way back. Its status is contract.ProblemFor's, the control
// API's: the page only chooses the words. Another tenant's record is
// simply not found.
func (u *UI) storeFail(w http.ResponseWriter, r *http.Request, s *session, err error, back string) {
	p := contract.ProblemFor(err)
	pv := &problemView{Back: back, Title: titles[p.Code], Detail: p.Detail}
	var own *contract.Problem
	if !errors.As(err, &own) {
		pv.Detail = err.Error() // the ledger's words name no request data
	}
	switch {
	case errors.Is(err, ledger.ErrForbidden):
		pv.Title = "Refused: you may not decide this"
	case p.Code == contract.CodeNotFound:
		pv.Detail = "There is no such record in your tenant."
	case p.Code == contract.CodeApprovalMismatch:
		pv.Detail = "The fingerprint you confirmed is not this approval's. Nothing was decided; look at the request again."
	case errors.Is(err, ledger.ErrReplyLost):
		pv.Title = "The store did not answer"
		pv.Detail = "The change may or may not have been made. Reload the page to see where it stands before trying again."
	case p.Code == contract.CodeStoreUnavailable:
		pv.Detail = "Nothing was changed. Try again in a moment."
	case p.Code == contract.CodeInternal:
		u.opts.Logger.Error("ui store", slog.String("path", r.URL.Path), slog.String("error", err.Error()))
		pv.Detail = "The error is in the gateway's log."
	}
	if pv.Title == "" {
		pv.Title = p.Title
	}
	u.failBack(w, r, s, p.Status, pv)
}

// titles are the page's words for the problems a person meets.
var titles = map[string]string{
	contract.CodeNotFound:          "Not found",
	contract.CodeForbidden:         "Not allowed",
	contract.CodeApprovalMismatch:  "Refused: the request changed",
	contract.CodeApprovalClosed:    "Already closed",
	contract.CodeIllegalTransition: "Not possible in this state",
	contract.CodeInvalidCommand:    "Not accepted",
	contract.CodeStoreUnavailable:  "The store is unavailable",
	contract.CodeInternal:          "Something went wrong",
}

// remaining says how long is left, for a countdown: "4m 10s", "expired".
func remaining(d time.Duration) string {
	if d <= 0 {
		return "expired"
	}
	return span(d) + " left"
}

// ago says how long ago something was.
func ago(d time.Duration) string {
	if d < time.Second {
		return "just now"
	}
	return span(d) + " ago"
}

// span writes a duration as a person reads it, to the second below an
// hour and to the minute above.
func span(d time.Duration) string {
	d = d.Truncate(time.Second)
	switch {
	case d >= 48*time.Hour:
		return fmt.Sprintf("%dd %dh", d/(24*time.Hour), d%(24*time.Hour)/time.Hour)
	case d >= time.Hour:
		return fmt.Sprintf("%dh %dm", d/time.Hour, d%time.Hour/time.Minute)
	case d >= time.Minute:
		return fmt.Sprintf("%dm %ds", d/time.Minute, d%time.Minute/time.Second)
	}
	return fmt.Sprintf("%ds", d/time.Second)
}
