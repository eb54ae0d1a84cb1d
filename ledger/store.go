package ledger

import (
	"context"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/idemgate/idemgate/audit"
)

// Steps are the ledger's atomic steps: each commits entirely (the state
// change, its history row and its audit event together) or not at all. A
// Store runs them on its own; a store bound to a caller's transaction
// (sqlite.Store.Tx, postgres.Store.Tx) runs them in that transaction, so
// that a Go service reserves, enqueues effects and completes in its own
// business transaction, and they commit with its writes or not at all.
// Times for leases and retention come from the store's own clock (the
// statement's start on PostgreSQL, statement_timestamp(), which in a caller's
// long transaction is not its start) so that gateways with skewed clocks agree.
type Steps interface {
	// Reserve registers (Tenant, Key) atomically, guarded by a unique
	// constraint. A new operation goes to executing with a lease when
	// p.Lease > 0 (the common path: one commit), or to prepared otherwise,
	// and the caller owns it (Reservation.Lease is set). For an existing
	// key it returns the existing operation and no lease; if that one is
	// executing past its lease, it is first made unknown. A different
	// fingerprint returns the existing operation and ErrFingerprintMismatch.
	// A business key already used on the route returns that operation as a
	// Duplicate. A concurrency key held by a live operation (executing,
	// unknown, or prepared awaiting approval) returns the holder and
	// ErrConcurrencyLocked.
	Reserve(ctx context.Context, p ReserveParams) (Reservation, error)

	// Acquire takes a lease on a prepared operation (or, with p.Resend, an
	// unknown one whose upstream honours the key), with a new owner token and
	// a larger fence, and counts an attempt. ErrConcurrencyLocked if another
	// operation holds its concurrency key meanwhile. An operation bound to
	// an approval is taken only while that approval is approved (or used,
	// after a release) and within its time, and the approval becomes used
	// in the same step; otherwise ErrApprovalRequired.
	Acquire(ctx context.Context, p AcquireParams) (Reservation, error)

	// Heartbeat extends the owner's lease to the store's now + d.
	Heartbeat(ctx context.Context, l Lease, d time.Duration) (Lease, error)

	// Complete stores the response and ends the operation, succeeded or failed.
	Complete(ctx context.Context, l Lease, o Outcome) (*Operation, error)

	// Release returns an executing operation to prepared: the owner knows the
	// request was not delivered.
	Release(ctx context.Context, l Lease, n Note) (*Operation, error)

	// MarkUnknown records that the request may have been delivered and its
	// outcome is not known.
	MarkUnknown(ctx context.Context, l Lease, n Note) (*Operation, error)

	// Resolve moves an unknown operation to succeeded, failed or prepared on
	// the word of a named actor (an operator, or a probe with proof).
	Resolve(ctx context.Context, p ResolveParams) (*Operation, error)

	// Approve grants a pending approval, unexpired, to a decider who may
	// decide it (DecisionParams.Check) and echoes its fingerprint; it must
	// then be used within its ValidFor. Of concurrent decisions exactly one
	// wins; the others get ErrApprovalClosed.
	Approve(ctx context.Context, p DecisionParams) (*Approval, error)
	// Deny refuses a pending approval as Approve grants one, and fails its
	// operation (prepared → failed) in the same step: every retry is then
	// told it was denied.
	Deny(ctx context.Context, p DecisionParams) (*Approval, error)
	// ReopenApproval gives a prepared operation whose approval lapsed a new
	// pending one, in one step guarded by the lapsed one's id: of
	// concurrent retries one opens it, the others find it open.
	ReopenApproval(ctx context.Context, p ReopenParams) (*Operation, error)

	// Enqueue writes effects (see Effect), prepared and due at once, in
	// the step's transaction: in a caller's business transaction they
	// commit with its writes or not at all. Effects are in the order
	// given; those of one operation are delivered in the order enqueued.
	// An effect enqueued again under its derived key with the same content
	// is the one already there (a repeat of a transaction whose commit
	// reply was lost); with other content it is ErrFingerprintMismatch,
	// and none of the batch is written.
	Enqueue(ctx context.Context, effects []EffectParams) ([]*Effect, error)
}

// Store is the operations registry: the steps, and what reads, sweeps and
// seals it. Every method is one atomic step.
type Store interface {
	Steps

	// ExpireLeases makes up to limit executing operations whose lease has
	// lapsed unknown and returns how many. Several instances may run it at
	// once; each operation is expired once.
	ExpireLeases(ctx context.Context, limit int) (int, error)

	// ExpireApprovals expires up to limit approvals past their time
	// (pending undecided, or approved unused) and returns how many: their
	// operations' concurrency groups are free again.
	ExpireApprovals(ctx context.Context, limit int) (int, error)
	// GetApproval reads one approval; ListApprovals pages through them in
	// id (creation) order.
	GetApproval(ctx context.Context, id string) (*Approval, error)
	ListApprovals(ctx context.Context, p ApprovalListParams) (ApprovalPage, error)

	Get(ctx context.Context, id string) (*Operation, error)
	GetByKey(ctx context.Context, tenant, key string) (*Operation, error)
	// List pages through operations in id (creation) order.
	List(ctx context.Context, p ListParams) (Page, error)
	// History returns an operation's transitions, oldest first.
	History(ctx context.Context, id string) ([]Event, error)
	// Usage returns what a tenant holds: its operations that are not final,
	// and the bytes of its stored responses. Limits are enforced on it.
	Usage(ctx context.Context, tenant string) (Usage, error)

	// ClaimProbes claims, for one reconciler, up to p.Limit unknown
	// operations of p.Routes whose probe is due and held by no other
	// reconciler: each claim is leased and fenced (a later claim, once the
	// lease lapses, refuses the earlier's result). Concurrent reconcilers
	// claim each operation once.
	ClaimProbes(ctx context.Context, p ProbeClaimParams) ([]ProbeClaim, error)
	// ProbeResult records a probe's outcome under its claim, and ends the
	// claim: applied → succeeded, the probe's answer stored as the replay;
	// not applied → prepared (the next retry runs it); inconclusive → still
	// unknown, due again at o.Next. ErrStaleOwner if a later claim fenced
	// this one; ErrIllegalTransition if the operation left unknown
	// meanwhile (an operator resolved it, a re-send took it).
	ProbeResult(ctx context.Context, l ProbeLease, o ProbeOutcome) (*Operation, error)

	// ClaimEffects claims, for one relay, up to p.Limit effects of
	// p.Targets due for delivery: prepared or unknown, their time come,
	// every earlier effect of their operation succeeded, and held by no
	// other relay. Executing ones whose lease lapsed are first made
	// unknown (sent, maybe delivered: due again at once, or parked past
	// p.MaxAttempts). Each claim moves the effect to executing with a new
	// token, a larger fence and a lease, and counts an attempt; concurrent
	// relays claim each effect once.
	ClaimEffects(ctx context.Context, p EffectClaimParams) ([]EffectClaim, error)
	// EffectResult records a delivery's outcome under its claim, and ends
	// it. ErrStaleOwner once the claim's lease has lapsed (by the store's
	// clock, swept or not) or a later claim fenced it; ErrIllegalTransition
	// if an operator settled it meanwhile. The same result recorded again
	// (a retry after a lost reply) is no error.
	EffectResult(ctx context.Context, l EffectLease, o EffectOutcome) (*Effect, error)
	// Effects reads the effects of a tenant's operation (by its key), in
	// their order.
	Effects(ctx context.Context, tenant, operationKey string) ([]*Effect, error)
	// GetEffect reads one effect, of whichever tenant: a caller serving
	// a tenant checks the effect's.
	GetEffect(ctx context.Context, id string) (*Effect, error)
	// ResolveEffect settles, on an operator's word, an effect that is
	// neither final nor executing, or makes a failed one prepared (to be
	// delivered again, once its cause is mended): ErrIllegalTransition
	// otherwise.
	ResolveEffect(ctx context.Context, p EffectResolveParams) (*Effect, error)

	// Stats reads what the metrics' gauges show, per tenant: operations by
	// state, the oldest executing and unknown ones, those executing past
	// their lease, pending approvals, and the latest audit checkpoint. It
	// is read from the store, never kept in memory, so that instances
	// sharing a store report the same.
	Stats(ctx context.Context) ([]TenantStats, error)

	// Purge deletes up to limit operations past their retention, and up
	// to limit final effects past theirs, and returns how many. Executing
	// and unknown operations are never purged: forgetting them would let a
	// retry repeat an effect that may have happened; nor are effects that
	// are not final, nor a final one that an effect of its operation not
	// yet final follows (a purged failure would release what it holds).
	Purge(ctx context.Context, limit int) (int, error)

	// AuditEvents reads the audit events of one operation (or of a
	// tenant), in the order they were recorded: every transition and every
	// approval granted or expired has one, written in the same statement,
	// and purging the operation keeps them.
	AuditEvents(ctx context.Context, p AuditParams) ([]audit.Event, error)
	// RecordEvents writes events that record no transition (a replay, a
	// conflict, a retry answered as it stands), in one step: the gateway
	// batches them so that replays write nothing on their own path.
	// ValidateEvents refuses a batch before any is written.
	RecordEvents(ctx context.Context, events []audit.Event) error
	// SealAudit runs fn as the one sealer of the store's audit log (the
	// single writer on SQLite, an advisory lock on PostgreSQL), in one
	// transaction that commits if fn returns nil. It reports false, and
	// does not run fn, when another sealer holds the log.
	SealAudit(ctx context.Context, fn func(audit.SealTx) error) (bool, error)
	// AuditLog reads a tenant's sealed events in log order, from p.From.
	AuditLog(ctx context.Context, p LogParams) ([]audit.Event, error)
	// AuditCheckpoints reads the signed checkpoints of a tenant's log (of
	// every tenant's, for ""), larger than size after, by tenant and size.
	AuditCheckpoints(ctx context.Context, tenant string, after int64) ([]audit.Stored, error)
	// LatestCheckpoint reads a tenant's latest signed checkpoint;
	// ErrNotFound before the first.
	LatestCheckpoint(ctx context.Context, tenant string) (*audit.Stored, error)
	// AuditHashes reads stored hashes of a tenant's tree, by tlog's index:
	// the proofs' material.
	AuditHashes(ctx context.Context, tenant string, indexes []int64) ([]tlog.Hash, error)

	// Ping checks that the store can do its work now: it answers, and a
	// write commits (a full disk or a read-only file is ErrUnavailable).
	Ping(ctx context.Context) error
	Close() error
}

// Relaxed is implemented by a store that can acknowledge an owner's
// completion before it is on disk (durability=relaxed). Whoever keeps
// copies of final operations (a replay cache) must then not keep those: a
// crash could take the completion back.
type Relaxed interface {
	Relaxed() bool
}

// IsRelaxed reports whether s says it may acknowledge before the disk.
func IsRelaxed(s Store) bool {
	r, ok := s.(Relaxed)
	return ok && r.Relaxed()
}

// Reservation is what Reserve and Acquire return: the operation as it now
// stands and, when the caller owns it, the lease to present to owner steps.
type Reservation struct {
	Op      *Operation
	Lease   *Lease // set when the caller holds the executing operation
	Created bool   // this call created the operation
	// Duplicate is set when the operation returned is another key's with
	// the same business key (tenant, route, value): one action, however
	// many keys name it.
	Duplicate bool
}

// Owned reports whether the caller holds the operation.
func (r Reservation) Owned() bool { return r.Lease != nil }

// ReserveParams describes a new operation.
type ReserveParams struct {
	Tenant, Key, Route, Fingerprint string
	Lease                           time.Duration // > 0: reserve with lease (executing); 0: prepared
	Retention                       time.Duration // how long the key is remembered once final
	BusinessKey, ConcurrencyKey     string
	Actor                           string // recorded in the history
	// Principal, Target, RunID and TraceID are the audit log's context of
	// the request (DESIGN.md, "Audit log"); all optional.
	Principal, Target, RunID, TraceID string
	// Probe is the route's probe request, rendered from this request
	// (DESIGN.md, "Reconciliation"); "" when the route declares none.
	Probe string
	// Approval, when set, reserves the operation prepared (Lease must be
	// 0) with a pending approval, in the same atomic step.
	Approval *ApprovalRequest
	// ID and Token, when set (NewID, NewToken), are the new operation's id
	// and its owner's token; unset, the store makes them. A caller that
	// sets them may repeat a reservation whose reply it lost (a store error
	// after the commit may have happened): the store recognises the
	// operation this very reservation created, and answers it as created,
	// with its lease, not as someone else's.
	ID, Token string
}

// MaxKeyLen bounds an idempotency key, as the HTTP contract does.
const MaxKeyLen = 255

// MinDuration is the finest lease or retention a store keeps: both stores
// count time in microseconds, and a shorter one would round to nothing.
const MinDuration = time.Microsecond

// Validate refuses parameters no store should write, so that both stores
// answer bad input alike, with ErrInvalid, before any driver sees it.
func (p ReserveParams) Validate() error {
	if err := texts(map[string]string{"tenant": p.Tenant, "route": p.Route, "fingerprint": p.Fingerprint,
		"actor": p.Actor}, p.BusinessKey, p.ConcurrencyKey, p.Principal, p.Target, p.RunID, p.TraceID, p.Probe); err != nil {
		return err
	}
	switch {
	case (p.ID != "" || p.Token != "") && (!cleanText(p.ID) || !cleanText(p.Token) || p.ID == "" || p.Token == ""):
		return invalid("id and token go together, as non-empty UTF-8 text")
	case p.Key == "" || len(p.Key) > MaxKeyLen || !cleanText(p.Key):
		return invalid("key must be 1 to %d bytes of UTF-8 text", MaxKeyLen)
	case p.Lease != 0 && p.Lease < MinDuration:
		return invalid("lease %v: want 0 (reserve only) or at least %v", p.Lease, MinDuration)
	case p.Retention < MinDuration:
		return invalid("retention %v: want at least %v", p.Retention, MinDuration)
	case p.Approval != nil && p.Lease != 0:
		return invalid("an operation that waits for an approval is reserved without a lease")
	case p.Approval != nil:
		return p.Approval.Validate()
	}
	return nil
}

// texts checks that each named field is non-empty UTF-8 text without NUL,
// and that the optional ones, when set, are too.
func texts(required map[string]string, optional ...string) error {
	for name, v := range required {
		if v == "" || !cleanText(v) {
			return invalid("%s must be non-empty UTF-8 text", name)
		}
	}
	for _, v := range optional {
		if !cleanText(v) {
			return invalid("a business or concurrency key, and a request's context, must be UTF-8 text")
		}
	}
	return nil
}

// cleanText reports whether s is valid UTF-8 without NUL, which PostgreSQL
// cannot store in text and SQLite would truncate at.
func cleanText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// State returns the state a new operation starts in.
func (p ReserveParams) State() State {
	if p.Lease > 0 {
		return Executing
	}
	return Prepared
}

// NewOperation is the operation a reservation of p creates, given what the
// store chose (the id) and read from its clock. Stores build it instead of
// reading back a row they have just written.
func (p ReserveParams) NewOperation(id string, created, leaseUntil, expires time.Time) *Operation {
	op := &Operation{ID: id, Tenant: p.Tenant, Key: p.Key, Route: p.Route, Fingerprint: p.Fingerprint,
		State: p.State(), BusinessKey: p.BusinessKey, ConcurrencyKey: p.ConcurrencyKey,
		Principal: p.Principal, Target: p.Target, RunID: p.RunID, TraceID: p.TraceID, Probe: p.Probe, CreatedAt: created, UpdatedAt: created, ExpiresAt: expires}
	if op.State == Executing {
		op.Attempts, op.Fence, op.LeaseUntil = 1, 1, leaseUntil
	}
	if p.Approval != nil {
		op.Approval = &ApprovalRef{ID: p.Approval.ID, Status: ApprovalPending, ExpiresAt: created.Add(p.Approval.TTL)}
	}
	return op
}

// AcquireParams takes a lease on an existing operation.
type AcquireParams struct {
	ID     string
	Lease  time.Duration
	Actor  string
	Reason string
	// Resend allows taking an unknown operation, for upstreams that honour
	// the key: the request is sent again with the same key and the upstream
	// deduplicates it. Never set it for any other upstream.
	Resend bool
	// RunID and TraceID are the sending request's, for the audit log; an
	// empty one keeps the operation's.
	RunID, TraceID string
}

// Validate refuses an acquire without a lease or an actor.
func (p AcquireParams) Validate() error {
	switch {
	case p.ID == "":
		return invalid("operation id is empty")
	case p.Lease < MinDuration:
		return invalid("lease %v: want at least %v", p.Lease, MinDuration)
	case p.Actor == "" || !cleanText(p.Actor) || !cleanText(p.Reason):
		return invalid("actor must be non-empty UTF-8 text")
	case !cleanText(p.RunID) || !cleanText(p.TraceID):
		return invalid("run and trace ids must be UTF-8 text")
	}
	return nil
}

// Outcome is how an owner ends its operation.
type Outcome struct {
	State     State // Succeeded or Failed
	Response  *Response
	ResultRef string
	ErrorCode string
	Reason    string
}

// Validate refuses an outcome that is not final, or that has no response:
// the stored response is what every retry will be given.
func (o Outcome) Validate() error {
	switch {
	case !o.State.Final():
		return invalid("complete needs succeeded or failed, not %s", o.State)
	case o.Response == nil:
		return invalid("complete needs the response to store")
	case !cleanText(o.Reason) || !cleanText(o.ResultRef) || !cleanText(o.ErrorCode):
		return invalid("reason, result reference and error code must be UTF-8 text")
	}
	return nil
}

// Note explains a release or a move to unknown, in the history.
type Note struct {
	Reason    string
	ErrorCode string
}

// Validate refuses text a store cannot keep.
func (n Note) Validate() error {
	if !cleanText(n.Reason) || !cleanText(n.ErrorCode) {
		return invalid("reason and error code must be UTF-8 text")
	}
	return nil
}

// ResolveParams is an audited decision about an unknown operation.
type ResolveParams struct {
	ID    string
	To    State // Succeeded, Failed or Prepared (proven not applied)
	Actor string
	Note  string
	// Response is optional, and only with a final state: an operator who
	// resolves an unknown operation may not know the upstream's answer. A
	// replay of a final operation without one answers with its status.
	Response  *Response
	ResultRef string
}

// Validate requires a named actor and a note: resolutions are audited. A
// response goes only with a final state: an operation back in prepared has
// no answer yet.
func (p ResolveParams) Validate() error {
	switch {
	case p.Response != nil && !p.To.Final():
		return invalid("a response can only be stored with succeeded or failed")
	case p.ID == "":
		return invalid("operation id is empty")
	case p.Actor == "" || !cleanText(p.Actor):
		return invalid("resolve needs a named actor")
	case p.Note == "" || !cleanText(p.Note) || !cleanText(p.ResultRef):
		return invalid("resolve needs a note, in UTF-8 text")
	}
	return nil
}

// AuditParams selects audit events: of one operation, or of a tenant,
// after the store id After, at most Limit (0: DefaultPage; at most MaxPage).
type AuditParams struct {
	Tenant      string
	OperationID string
	After       int64
	Limit       int
}

// PageLimit returns the effective page size.
func (p AuditParams) PageLimit() int { return ListParams{Limit: p.Limit}.PageLimit() }

// ValidateEvents refuses events a store should not record as they
// stand: a transition's kind (those are written with their transition,
// never apart), no tenant, or text a store cannot keep.
func ValidateEvents(events []audit.Event) error {
	for _, e := range events {
		if !slices.Contains(audit.Recorded, e.Kind) {
			return invalid("event kind %q is not recorded apart from a transition", e.Kind)
		}
		if err := texts(map[string]string{"tenant": e.Tenant}, e.OperationID, e.Principal, e.RunID, e.TraceID, e.Key,
			e.Fingerprint, e.Route, e.Target, e.Actor, e.Reason, e.ResultRef, e.ResponseSHA256); err != nil {
			return err
		}
		if e.From != "" || e.To != "" || e.UpstreamStatus < 0 || e.UpstreamStatus > 999 {
			return invalid("an event recorded apart has no transition, and a status of three digits")
		}
	}
	return nil
}

// LogParams selects a page of a tenant's sealed events: positions From
// onwards, at most Limit (0 or more than MaxLogPage: MaxLogPage). Pages
// are larger than a list's: an export reads the whole log.
type LogParams struct {
	Tenant string
	From   int64
	Limit  int
}

// PageLimit returns the effective page size.
func (p LogParams) PageLimit() int {
	if p.Limit <= 0 || p.Limit > MaxLogPage {
		return MaxLogPage
	}
	return p.Limit
}

// MaxLogPage bounds a page of the audit log.
const MaxLogPage = 5000

// TenantStats is one tenant's part of Stats. Times are zero when there is
// nothing to date.
type TenantStats struct {
	Tenant  string
	ByState map[State]int64
	// OldestExecuting and OldestUnknown are when the longest-standing
	// operation in each state entered it.
	OldestExecuting, OldestUnknown time.Time
	Stuck                          int64 // executing past their lease, by the store's clock
	ApprovalsPending               int64
	OldestApproval                 time.Time // the oldest pending approval's creation
	LastCheckpoint                 time.Time // when the tenant's latest audit checkpoint was signed
}

// Usage is what one tenant holds in the store.
type Usage struct {
	Live   int64 // operations prepared, executing or unknown
	Stored int64 // bytes of stored responses, headers and bodies
}

// ListParams selects a page of operations. Empty fields do not filter.
type ListParams struct {
	Tenant string
	State  State
	After  string // cursor: the last id of the previous page
	Limit  int    // at most MaxPage; 0 means DefaultPage
}

// Page sizes for List.
const (
	DefaultPage = 50
	MaxPage     = 500
)

// PageLimit returns the effective page size.
func (p ListParams) PageLimit() int {
	switch {
	case p.Limit <= 0:
		return DefaultPage
	case p.Limit > MaxPage:
		return MaxPage
	}
	return p.Limit
}

// Page is one page of List; Next is the cursor of the next page, or "".
type Page struct {
	Operations []*Operation
	Next       string
}

// NewPage builds a page from up to limit+1 rows read in id order: the extra
// row, if present, only proves that another page exists.
func NewPage(ops []*Operation, limit int) Page {
	ops, next := pageOf(ops, limit, func(op *Operation) string { return op.ID })
	return Page{Operations: ops, Next: next}
}

// pageOf cuts up to limit+1 rows read in id order to a page and the cursor
// of the next one ("" when the extra row is absent).
func pageOf[T any](rows []T, limit int, id func(T) string) ([]T, string) {
	if len(rows) <= limit {
		return rows, ""
	}
	return rows[:limit], id(rows[limit-1])
}

// StatsByTenant gathers the rows of a store's Stats queries by tenant.
type StatsByTenant map[string]*TenantStats

func (b StatsByTenant) of(tenant string) *TenantStats {
	t := b[tenant]
	if t == nil {
		t = &TenantStats{Tenant: tenant, ByState: map[State]int64{}}
		b[tenant] = t
	}
	return t
}

// State adds the count of a tenant's operations in state, when the oldest
// entered it, and how many executing ones are past their lease.
func (b StatsByTenant) State(tenant string, s State, n int64, oldest time.Time, stuck int64) {
	t := b.of(tenant)
	t.ByState[s] = n
	switch s {
	case Executing:
		t.OldestExecuting, t.Stuck = oldest, stuck
	case Unknown:
		t.OldestUnknown = oldest
	}
}

// Approvals adds a tenant's pending approvals and the oldest's creation.
func (b StatsByTenant) Approvals(tenant string, n int64, oldest time.Time) {
	t := b.of(tenant)
	t.ApprovalsPending, t.OldestApproval = n, oldest
}

// Checkpoint adds when a tenant's latest audit checkpoint was signed.
func (b StatsByTenant) Checkpoint(tenant string, at time.Time) { b.of(tenant).LastCheckpoint = at }

// List is the tenants' stats, by tenant.
func (b StatsByTenant) List() []TenantStats {
	out := make([]TenantStats, 0, len(b))
	for _, t := range b {
		out = append(out, *t)
	}
	slices.SortFunc(out, func(x, y TenantStats) int { return strings.Compare(x.Tenant, y.Tenant) })
	return out
}
