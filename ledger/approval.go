package ledger

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/oklog/ulid/v2"
)

// ApprovalStatus is where a human decision stands (docs/design.md, "Approvals").
type ApprovalStatus string

// The statuses of an approval. Pending and approved hold the operation's
// concurrency group; used means an owner took the lease it permitted.
const (
	ApprovalPending  ApprovalStatus = "pending"
	ApprovalApproved ApprovalStatus = "approved"
	ApprovalDenied   ApprovalStatus = "denied"
	ApprovalExpired  ApprovalStatus = "expired"
	ApprovalUsed     ApprovalStatus = "used"
)

// ApprovalStatuses lists the statuses, in lifecycle order.
var ApprovalStatuses = []ApprovalStatus{ApprovalPending, ApprovalApproved, ApprovalDenied, ApprovalExpired, ApprovalUsed}

// ParseApprovalStatus returns the status named s, or an error naming all.
func ParseApprovalStatus(s string) (ApprovalStatus, error) {
	st := ApprovalStatus(s)
	if !slices.Contains(ApprovalStatuses, st) {
		return "", fmt.Errorf("%w: unknown approval status %q (want one of %v)", ErrInvalid, s, ApprovalStatuses)
	}
	return st, nil
}

// Approval is one human decision about one operation: a permission for one
// command (its fingerprint), never a category. An operation whose approval
// expired gets a new one; the old record stays, expired.
type Approval struct {
	ID          string // "apr_" + a ULID
	OpID        string
	Tenant      string
	Key         string
	Route       string
	Target      string // the concrete method and path
	Fingerprint string
	Summary     string
	Command     []byte // the validated command the fingerprint covers, canonical JSON
	// Headers are the request's headers but its credentials, its tracing
	// and its content's: what the approver is shown, and, with the
	// executing attempt's own tracing, content and credentials, exactly
	// what is sent (a retry adds nothing; issue 24, 7.7). Nil (unlike
	// empty) means none were kept: an approval opened before they were,
	// whose execution sends the attempt's headers as they are.
	Headers     map[string][]string
	Reversible  bool
	RequestedBy string
	Approvers   []string // roles that may decide
	Status      ApprovalStatus
	CreatedAt   time.Time
	// ExpiresAt is when a pending approval expires undecided, and once
	// approved, when it must have been used.
	ExpiresAt time.Time
	ValidFor  time.Duration
	DecidedBy string
	DecidedAt time.Time // zero until decided
	Note      string
}

// ApprovalRef is the part of an operation's current approval kept on the
// operation itself: enough to answer a retry without reading the approval.
type ApprovalRef struct {
	ID        string
	Status    ApprovalStatus
	ExpiresAt time.Time
}

// Usable reports whether the approval lets its operation be executed at
// now (by the caller's clock; the store checks again by its own).
func (a *ApprovalRef) Usable(now time.Time) bool {
	return a == nil || ((a.Status == ApprovalApproved || a.Status == ApprovalUsed) && !now.After(a.ExpiresAt))
}

// Lapsed reports whether the approval can no longer be decided or used at
// now: expired, or past its time. The operation then needs a new one.
func (a *ApprovalRef) Lapsed(now time.Time) bool {
	switch a.Status {
	case ApprovalExpired:
		return true
	case ApprovalPending, ApprovalApproved, ApprovalUsed:
		return now.After(a.ExpiresAt)
	}
	return false
}

// ApprovalRequest asks, at reservation, for a human decision before the
// operation may execute. The operation is reserved prepared with a pending
// approval in the same atomic step.
type ApprovalRequest struct {
	ID          string // NewApprovalID() when empty
	Target      string
	Summary     string
	Command     []byte
	Headers     map[string][]string // see Approval.Headers
	Reversible  bool
	RequestedBy string
	Approvers   []string
	TTL         time.Duration // a pending approval expires undecided after this
	ValidFor    time.Duration // an approved one must be used within this
}

// NewApprovalID returns a new approval id: "apr_" and a ULID.
func NewApprovalID() string { return "apr_" + ulid.Make().String() }

// Validate refuses a request no store should write.
func (r ApprovalRequest) Validate() error {
	switch {
	case r.ID != "" && !cleanText(r.ID):
		return invalid("approval id must be UTF-8 text")
	case r.Target == "" || !cleanText(r.Target) || !cleanText(r.Summary) || !cleanText(string(r.Command)):
		return invalid("an approval needs a target, and its summary and command in UTF-8 text")
	case r.RequestedBy == "" || !cleanText(r.RequestedBy):
		return invalid("an approval needs the requesting principal")
	case len(r.Approvers) == 0 || slices.ContainsFunc(r.Approvers, func(s string) bool { return s == "" || !cleanText(s) }):
		return invalid("an approval needs the roles that may decide")
	case r.TTL < MinDuration || r.ValidFor < MinDuration:
		return invalid("approval ttl %v and valid_for %v: want at least %v", r.TTL, r.ValidFor, MinDuration)
	}
	for name, values := range r.Headers {
		if name == "" || !Holdable(name) || !Holdable(values...) {
			return invalid("header %q: an approval shows its request's headers, which must be UTF-8 text", name)
		}
	}
	return nil
}

// DecisionParams is an approver's decision. The decider echoes the
// fingerprint it was shown: a decision for any other request is refused.
type DecisionParams struct {
	ApprovalID  string
	Tenant      string // the decider's: another tenant's approval is not found
	Fingerprint string
	Actor       string   // the decider's principal name
	Roles       []string // the decider's roles
	Note        string
}

// fingerprintForm is what a fingerprint looks like.
var fingerprintForm = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// ValidFingerprint reports whether s has a fingerprint's form.
func ValidFingerprint(s string) bool { return fingerprintForm.MatchString(s) }

// Validate refuses a decision without an approval, a tenant, a named actor
// or a well-formed fingerprint.
func (p DecisionParams) Validate() error {
	switch {
	case p.ApprovalID == "" || !cleanText(p.ApprovalID):
		return invalid("approval id is empty")
	case p.Tenant == "" || !cleanText(p.Tenant):
		return invalid("a decision needs the decider's tenant")
	case p.Actor == "" || !cleanText(p.Actor) || !cleanText(p.Note):
		return invalid("a decision needs a named actor, and its note in UTF-8 text")
	case p.Fingerprint == "":
		return invalid("a decision must echo the fingerprint it decides on")
	case !ValidFingerprint(p.Fingerprint):
		return invalid("fingerprint %q: want sha256: and 64 lowercase hex digits", p.Fingerprint)
	}
	return nil
}

// Check says whether the decider may decide a, given a as read: same
// tenant (else not found), an approver role, not the requester, the same
// fingerprint, and a still pending approval by now. The store's guarded
// step checks status, time and fingerprint again, atomically.
func (p DecisionParams) Check(a *Approval, now time.Time) error {
	switch {
	case a.Tenant != p.Tenant:
		return fmt.Errorf("approval %s: %w", p.ApprovalID, ErrNotFound)
	case !slices.ContainsFunc(a.Approvers, func(r string) bool { return slices.Contains(p.Roles, r) }):
		return fmt.Errorf("approval %s needs one of the roles %v: %w", a.ID, a.Approvers, ErrForbidden)
	case a.RequestedBy == p.Actor:
		return fmt.Errorf("approval %s: %s requested this operation and cannot decide it: %w", a.ID, p.Actor, ErrForbidden)
	case subtle.ConstantTimeCompare([]byte(a.Fingerprint), []byte(p.Fingerprint)) != 1:
		return fmt.Errorf("approval %s: %w", a.ID, ErrApprovalMismatch)
	case a.Status != ApprovalPending:
		return fmt.Errorf("approval %s is %s: %w", a.ID, a.Status, ErrApprovalClosed)
	case now.After(a.ExpiresAt):
		return fmt.Errorf("approval %s expired at %s: %w", a.ID, a.ExpiresAt.UTC().Format(time.RFC3339), ErrApprovalClosed)
	}
	return nil
}

// ReopenParams opens a new approval for a prepared operation whose
// approval lapsed (expired undecided, or approved and not used in time).
type ReopenParams struct {
	OpID     string
	Previous string // the lapsed approval's id: the guard
	Request  ApprovalRequest
	Actor    string
}

// Validate refuses a reopening without its operation, its previous
// approval or a valid request.
func (p ReopenParams) Validate() error {
	if p.OpID == "" || p.Previous == "" || p.Actor == "" || !cleanText(p.Actor) {
		return invalid("reopen needs the operation, its lapsed approval and an actor")
	}
	return p.Request.Validate()
}

// ApprovalListParams selects a page of approvals. Empty fields do not
// filter; Limit is as for ListParams.
type ApprovalListParams struct {
	Tenant string
	Status ApprovalStatus
	After  string
	Limit  int
}

// PageLimit returns the effective page size.
func (p ApprovalListParams) PageLimit() int { return ListParams{Limit: p.Limit}.PageLimit() }

// ApprovalPage is one page of ListApprovals.
type ApprovalPage struct {
	Approvals []*Approval
	Next      string
}

// NewApprovalPage builds a page from up to limit+1 rows read in id order.
func NewApprovalPage(as []*Approval, limit int) ApprovalPage {
	as, next := pageOf(as, limit, func(a *Approval) string { return a.ID })
	return ApprovalPage{Approvals: as, Next: next}
}

// Approval errors.
var (
	// ErrApprovalRequired: the operation waits for a decision (or a new
	// approval): it cannot be executed yet.
	ErrApprovalRequired = errors.New("the operation waits for an approval")
	// ErrApprovalMismatch: a decision echoed another fingerprint than the
	// approval's: the decider was shown another request.
	ErrApprovalMismatch = errors.New("the decision is for another request than the approval's")
	// ErrApprovalClosed: the approval is no longer pending (decided by
	// someone else, expired, or used).
	ErrApprovalClosed = errors.New("the approval is no longer pending")
	// ErrForbidden: the decider may not decide (no approver role, or the
	// requester itself).
	ErrForbidden = errors.New("not allowed")
)

// ActorApprovalExpiry is recorded for approvals the sweep expires.
const ActorApprovalExpiry = "idemgate:approval-expiry"
