package webui

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemgate/idemgate/approval"
)

// The default bounds on the sessions kept in memory: maxSessions in all,
// a quarter of them for one tenant (MaxSessionsPerTenant), and
// maxPerPrincipal for one principal. A principal past its share ends its
// own oldest session, and never another's; a tenant past its share, or a
// full table, refuses a newcomer (errTenantFull, errSessionsFull) rather
// than signing anyone out: one principal signing in in a loop cannot
// sign out an approver (issue 24, 7.12), and one tenant's principals (a
// JWT issuer's subjects, as many as it signs) cannot take every place
// from the other tenants (issue 34, 11).
const (
	maxSessions     = 10000
	maxPerPrincipal = 20
)

// The refusals of a sign-in with no place for it: every place is held by
// another principal's live session, or every place of the tenant's share.
var (
	errSessionsFull = errors.New("webui: every session place is taken by other principals")
	errTenantFull   = errors.New("webui: every session place of the tenant's share is taken by its other principals")
	// errChanged refuses a sign-in that a page of the previous
	// configuration authenticated after a reload changed its principal.
	errChanged = errors.New("webui: the configuration changed this principal as it signed in")
)

// SignIn is what a token signs in (Options.Authenticate): its principal,
// until when (zero: no end of its own; the session ends then at the
// latest), and Credential, an opaque name of what authenticated it that
// Sessions.Retain's rule reads ("" for none).
type SignIn struct {
	Principal  approval.Principal
	Until      time.Time
	Credential string
}

// session is a signed-in principal. Its id lives only in the browser's
// cookie; the server keeps its SHA-256, so a copy of the server's memory
// holds no usable session.
type session struct {
	id         string // set only on the copy handed to the request that holds the cookie
	principal  approval.Principal
	credential string // SignIn.Credential
	csrf       string
	created    time.Time
	seen       time.Time
	until      time.Time // the token's end, if it has one: the session's at the latest
}

// Sessions is the web page's in-memory session table. A restart signs
// everyone out, which is the safe way round for a page that approves
// deployments. A server that builds its page again on a reload gives the
// new page the same table (Options.Sessions) and ends, with Retain, only
// the sessions whose principal the new configuration changed.
type Sessions struct {
	mu        sync.Mutex
	m         map[[32]byte]*session
	owned     map[string][][32]byte // by principal (owner), oldest first
	tenants   map[string]int        // sessions by tenant
	ttl, idle time.Duration
	now       func() time.Time
	// max, perTenant and perPrincipal bound the table, a tenant's share
	// (0: a quarter of max) and a principal's; a test makes them small.
	max, perTenant, perPrincipal int
	// keep, once Retain has set it, is the running configuration's rule
	// of which sessions may be: a sign-in it refuses is not made.
	keep func(p approval.Principal, credential string) bool
}

// NewSessions is an empty table, for Options.Sessions; each page given
// it sets its bounds and clock (its Options').
func NewSessions() *Sessions {
	return &Sessions{m: map[[32]byte]*session{}, owned: map[string][][32]byte{}, tenants: map[string]int{},
		ttl: 8 * time.Hour, idle: 30 * time.Minute, now: time.Now, max: maxSessions, perPrincipal: maxPerPrincipal}
}

func newSessions(ttl, idle time.Duration, now func() time.Time) *Sessions {
	s := NewSessions()
	s.ttl, s.idle, s.now = ttl, idle, now
	return s
}

// configure sets the table's bounds and clock to a page's options.
func (s *Sessions) configure(o Options) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ttl, s.idle, s.now = o.SessionTTL, o.SessionIdle, o.Now
	s.max, s.perTenant, s.perPrincipal = o.MaxSessions, o.MaxSessionsPerTenant, o.MaxSessionsPerPrincipal
}

// Retain ends every session whose principal keep refuses, given what
// signed it in (SignIn.Credential), and refuses from now on a sign-in
// keep refuses: a reload keeps the sessions of the principals it left as
// they were, and ends the others', even one a page of the previous
// configuration signs in meanwhile. It returns how many it ended.
func (s *Sessions) Retain(keep func(p approval.Principal, credential string) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keep = keep
	ended := 0
	for k, ss := range s.m {
		if !keep(ss.principal, ss.credential) {
			s.drop(k)
			ended++
		}
	}
	return ended
}

// owner names a principal across tenants.
func owner(p approval.Principal) string { return p.Tenant + "\x00" + p.Name }

// tenantShare is how many sessions one tenant may hold. The caller holds
// mu.
func (s *Sessions) tenantShare() int {
	if s.perTenant > 0 {
		return s.perTenant
	}
	return max(1, s.max/4)
}

// create starts a session for p, with no credential.
func (s *Sessions) create(p approval.Principal, until time.Time) (string, error) {
	return s.start(SignIn{Principal: p, Until: until})
}

// start starts a session for in and returns its id. To make room it ends
// expired sessions, then its principal's own oldest, never another
// principal's.
func (s *Sessions) start(in SignIn) (string, error) {
	id, p := randomText(), in.Principal
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keep != nil && !s.keep(p, in.Credential) {
		return "", errChanged
	}
	now := s.now()
	ss := &session{principal: p, credential: in.Credential, csrf: randomText(), created: now, seen: now,
		until: in.Until}
	who := owner(p)
	full := func() bool { return len(s.m) >= s.max || s.tenants[p.Tenant] >= s.tenantShare() }
	if full() {
		s.prune(now)
	}
	if mine := s.owned[who]; len(mine) >= s.perPrincipal || (full() && len(mine) > 0) {
		s.drop(mine[0])
	}
	switch {
	case s.tenants[p.Tenant] >= s.tenantShare():
		return "", errTenantFull
	case len(s.m) >= s.max:
		return "", errSessionsFull
	}
	key := sha256.Sum256([]byte(id))
	s.m[key] = ss
	s.owned[who] = append(s.owned[who], key)
	s.tenants[p.Tenant]++
	return id, nil
}

// full says, for the sign-in page and the log, why tenant's newcomer has
// no place (err, errTenantFull or errSessionsFull), and the setting that
// bounds it.
func (s *Sessions) full(tenant string, err error) (why, setting string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if errors.Is(err, errTenantFull) {
		return fmt.Sprintf("tenant %q holds its whole share of the sessions, %d of them", tenant, s.tenantShare()),
			"ui.max_sessions_per_tenant"
	}
	return fmt.Sprintf("every one of the %d sessions is held", s.max), "ui.max_sessions"
}

// get returns a copy of the live session id names, and counts this use
// against its idle time. An expired one is ended.
func (s *Sessions) get(id string) (*session, bool) {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
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
func (s *Sessions) end(id string) {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop(key)
}

// drop ends the session under key, in the table, in its principal's
// list and in its tenant's count. The caller holds mu.
func (s *Sessions) drop(key [32]byte) {
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
	if s.tenants[ss.principal.Tenant]--; s.tenants[ss.principal.Tenant] <= 0 {
		delete(s.tenants, ss.principal.Tenant)
	}
}

func (s *Sessions) expired(ss *session, now time.Time) bool {
	return !now.Before(ss.created.Add(s.ttl)) || !now.Before(ss.seen.Add(s.idle)) ||
		!ss.until.IsZero() && !now.Before(ss.until)
}

// prune ends the expired sessions. The caller holds mu.
func (s *Sessions) prune(now time.Time) {
	for k, ss := range s.m {
		if s.expired(ss, now) {
			s.drop(k)
		}
	}
}
