package ledger

import (
	"context"
	"time"

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
	// Reserve registers (Tenant, Namespace, Key) atomically, guarded by a
	// unique constraint. A new operation goes to executing with a lease when
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
	// GetByKey reads the operation of a tenant's key in its namespace;
	// ErrInvalid without a namespace (OpKey.Lookup).
	GetByKey(ctx context.Context, k OpKey) (*Operation, error)
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
	// SettleEffects is a relay's turn in one transaction, one commit:
	// each result recorded as EffectResult records it (a refused one is
	// that result's error, and leaves the others alone), then, if
	// p.Claim.Limit is positive, a claim as ClaimEffects makes it, which
	// sees those results: an operation's next effect is due in the very
	// turn that recorded its predecessor. An error means the turn may
	// not have been made (a lost reply leaves it unknown); its results
	// may be recorded again, which is no error for one recorded already.
	SettleEffects(ctx context.Context, p EffectSettle) (EffectSettled, error)
	// Effects reads the effects of a tenant's operation (by its
	// identity), in their order.
	Effects(ctx context.Context, k OpKey) ([]*Effect, error)
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
	// CommitStats counts this handle's group commits since it was opened
	// (this instance's, unlike Stats): how many steps share a commit and
	// what a commit takes, the figures that say when the store is the
	// limit.
	CommitStats() CommitStats

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

// IsRelaxed reports whether s says it may acknowledge before the disk
// (s is any store, or a consumer's narrow view of one).
func IsRelaxed(s any) bool {
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
