package webui

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/approval"
	"github.com/idemgate/idemgate/control"
)

var (
	alice = approval.Principal{Name: "alice", Tenant: "acme", Roles: []string{"approver"}}
	agent = approval.Principal{Name: "bot", Tenant: "globex", Roles: []string{"agent"}}
)

// clock is a time the test moves.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestOnePrincipalCannotSignOutAnother: the reproduction of issue 24
// (7.12). Another tenant's agent signs in 10,200 times, more than the
// whole table holds; the approver's session lives on, and the agent keeps
// only its newest sessions, its oldest ended to make room.
func TestOnePrincipalCannotSignOutAnother(t *testing.T) {
	c := &clock{time.Now()}
	s := newSessions(8*time.Hour, 30*time.Minute, c.now)
	approver, err := s.create(alice, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range maxSessions + 200 {
		c.t = c.t.Add(time.Millisecond)
		id, err := s.create(agent, time.Time{})
		if err != nil {
			t.Fatalf("sign-in %d of one principal: %v", i, err)
		}
		ids = append(ids, id)
	}
	if _, ok := s.get(approver); !ok {
		t.Fatal("the approver was signed out by another principal's sign-ins")
	}
	live := 0
	for _, id := range ids {
		if _, ok := s.get(id); ok {
			live++
		}
	}
	_, newest := s.get(ids[len(ids)-1])
	_, oldest := s.get(ids[0])
	if live != maxPerPrincipal || !newest || oldest {
		t.Fatalf("the agent holds %d sessions (want %d), newest live %t, oldest live %t", live, maxPerPrincipal, newest, oldest)
	}
}

// TestAFullTableRefusesANewcomer: when every place is held by live
// sessions of other principals, a newcomer is refused rather than
// signing anyone out; once they expire, the newcomer gets its place. A
// principal that holds a place signs in again by giving up its own oldest.
func TestAFullTableRefusesANewcomer(t *testing.T) {
	c := &clock{time.Now()}
	s := newSessions(8*time.Hour, 30*time.Minute, c.now)
	s.max, s.perTenant, s.perPrincipal = 4, 4, 2
	var held []string
	for i := range 4 {
		id, err := s.create(approval.Principal{Name: fmt.Sprint("p", i), Tenant: "initech"}, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, id)
		c.t = c.t.Add(time.Minute)
	}
	if _, err := s.create(alice, time.Time{}); err != errSessionsFull {
		t.Fatalf("a newcomer to a full table: %v, want errSessionsFull", err)
	}
	for i, id := range held {
		if _, ok := s.get(id); !ok {
			t.Fatalf("session %d was ended for a newcomer", i)
		}
	}
	again, err := s.create(approval.Principal{Name: "p0", Tenant: "initech"}, time.Time{})
	if err != nil {
		t.Fatalf("a principal with a place signs in again: %v", err)
	}
	_, first := s.get(held[0])
	_, second := s.get(again)
	if first || !second {
		t.Fatalf("p0 again in a full table: its first session live %t (want false: its own gives way), its new one %t", first, second)
	}
	for i, id := range held[1:] {
		if _, ok := s.get(id); !ok {
			t.Fatalf("session %d was ended for another principal's", i+1)
		}
	}
	c.t = c.t.Add(31 * time.Minute) // every session idles out
	if _, err := s.create(alice, time.Time{}); err != nil {
		t.Fatalf("a newcomer once the others expired: %v", err)
	}
}

// TestSignInToAFullTableSaysSo: the sign-in form answers 503 with words,
// and no session, when the table has no place for the newcomer.
func TestSignInToAFullTableSaysSo(t *testing.T) {
	u, err := New(Options{Store: noStore{}, Operator: &control.Operator{},
		Authenticate: func(*http.Request, string) (SignIn, bool) { return SignIn{Principal: alice}, true }})
	if err != nil {
		t.Fatal(err)
	}
	u.sessions.max = 1
	if _, err := u.sessions.create(agent, time.Time{}); err != nil {
		t.Fatal(err)
	}
	form := httptest.NewRecorder()
	u.ServeHTTP(form, httptest.NewRequest("GET", "/ui/signin", nil))
	token := form.Result().Cookies()[0].Value
	req := httptest.NewRequest("POST", "/ui/signin", strings.NewReader(url.Values{"csrf": {token}, "token": {"t"}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: signinCookie, Value: token})
	w := httptest.NewRecorder()
	u.ServeHTTP(w, req)
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "Too many people are signed in") ||
		strings.Contains(w.Header().Get("Set-Cookie"), sessionCookie+"=") {
		t.Fatalf("sign-in to a full table: %d %v\n%s", w.Code, w.Header(), w.Body)
	}
}

// noStore is a Store the sign-in never reads.
type noStore struct{ Store }

// TestSessionEndsWithItsToken: a session made from a token with an end
// of its own (a JWT's exp) ends then, however long the page's sessions
// last otherwise.
func TestSessionEndsWithItsToken(t *testing.T) {
	c := &clock{time.Now()}
	s := newSessions(8*time.Hour, 30*time.Minute, c.now)
	short, err := s.create(alice, c.t.Add(5*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	long, _ := s.create(agent, time.Time{})
	c.t = c.t.Add(4 * time.Minute)
	if _, ok := s.get(short); !ok {
		t.Fatal("ended before its token")
	}
	c.t = c.t.Add(2 * time.Minute)
	if _, ok := s.get(short); ok {
		t.Fatal("outlived its token")
	}
	if _, ok := s.get(long); !ok {
		t.Fatal("a session without a token's end ended")
	}
}

// signIn posts the sign-in form to u with token, as a browser does.
func signIn(u *UI, token string) *httptest.ResponseRecorder {
	form := httptest.NewRecorder()
	u.ServeHTTP(form, httptest.NewRequest("GET", "/ui/signin", nil))
	csrf := form.Result().Cookies()[0].Value
	req := httptest.NewRequest("POST", "/ui/signin", strings.NewReader(url.Values{"csrf": {csrf}, "token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(&http.Cookie{Name: signinCookie, Value: csrf})
	w := httptest.NewRecorder()
	u.ServeHTTP(w, req)
	return w
}

// TestOneTenantCannotFillTheTable: the reproduction of issue 34 (11).
// One tenant's principals (a JWT's subjects: as many as its issuer
// signs), each signing in twenty times, take at most their tenant's share
// of the table (a quarter of it by default): another tenant's newcomer
// still signs in, and the tenant's own newcomer past its share is
// refused with a page that names the cause and the setting to raise.
func TestOneTenantCannotFillTheTable(t *testing.T) {
	u, err := New(Options{Store: noStore{}, Operator: &control.Operator{},
		Authenticate: func(_ *http.Request, token string) (SignIn, bool) {
			tenant, name, _ := strings.Cut(token, "/")
			return SignIn{Principal: approval.Principal{Name: name, Tenant: tenant}}, true
		}})
	if err != nil {
		t.Fatal(err)
	}
	u.sessions.max = 40
	for i := range 51 {
		for range 20 {
			signIn(u, fmt.Sprint("acme/jwt:subject-", i))
		}
	}
	if w := signIn(u, "globex/bob"); w.Code != http.StatusSeeOther {
		t.Fatalf("another tenant's newcomer: %d\n%s", w.Code, w.Body)
	}
	w := signIn(u, "acme/jwt:newcomer")
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "ui.max_sessions_per_tenant") ||
		!strings.Contains(w.Body.String(), "acme") {
		t.Fatalf("a newcomer of the tenant at its share: %d\n%s", w.Code, w.Body)
	}
}

// TestRetainEndsOnlyTheChanged: Retain ends the sessions its rule
// refuses and keeps the others; a sign-in it refuses (a page of the
// previous configuration, still answering) is not made.
func TestRetainEndsOnlyTheChanged(t *testing.T) {
	s := NewSessions()
	a, _ := s.start(SignIn{Principal: alice, Credential: "token:a"})
	b, _ := s.start(SignIn{Principal: agent, Credential: "token:b"})
	n := s.Retain(func(p approval.Principal, credential string) bool { return credential == "token:b" })
	_, aLive := s.get(a)
	_, bLive := s.get(b)
	if n != 1 || aLive || !bLive {
		t.Fatalf("Retain ended %d: alice live %t, agent live %t", n, aLive, bLive)
	}
	if _, err := s.start(SignIn{Principal: alice, Credential: "token:a"}); err != errChanged {
		t.Fatalf("a sign-in the rule refuses: %v", err)
	}
	if _, err := s.start(SignIn{Principal: agent, Credential: "token:b"}); err != nil {
		t.Fatalf("a sign-in the rule keeps: %v", err)
	}
}
