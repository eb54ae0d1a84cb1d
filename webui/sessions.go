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
)

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
	tenants   map[string]int        // sessions by tenant
	ttl, idle time.Duration
	now       func() time.Time
	// max, perTenant and perPrincipal bound the table, a tenant's share
	// (0: a quarter of max) and a principal's; a test makes them small.
	max, perTenant, perPrincipal int
}

func newSessions(ttl, idle time.Duration, now func() time.Time) *sessions {
	return &sessions{m: map[[32]byte]*session{}, owned: map[string][][32]byte{}, tenants: map[string]int{}, ttl: ttl,
		idle: idle, now: now, max: maxSessions, perPrincipal: maxPerPrincipal}
}

// owner names a principal across tenants.
func owner(p approval.Principal) string { return p.Tenant + "\x00" + p.Name }

// tenantShare is how many sessions one tenant may hold. The caller holds
// mu.
func (s *sessions) tenantShare() int {
	if s.perTenant > 0 {
		return s.perTenant
	}
	return max(1, s.max/4)
}

// create starts a session for p and returns its id. To make room it ends
// expired sessions, then p's own oldest, never another principal's.
func (s *sessions) create(p approval.Principal, until time.Time) (string, error) {
	id := randomText()
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	ss := &session{principal: p, csrf: randomText(), created: now, seen: now, until: until}
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
func (s *sessions) full(tenant string, err error) (why, setting string) {
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
func (s *sessions) get(id string) (*session, bool) {
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
func (s *sessions) end(id string) {
	key := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.drop(key)
}

// drop ends the session under key, in the table, in its principal's
// list and in its tenant's count. The caller holds mu.
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
	if s.tenants[ss.principal.Tenant]--; s.tenants[ss.principal.Tenant] <= 0 {
		delete(s.tenants, ss.principal.Tenant)
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
