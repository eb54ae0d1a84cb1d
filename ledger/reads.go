package ledger

import (
	"slices"
	"strings"
	"time"

	"github.com/idemgate/idemgate/audit"
)

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
		if err := texts(map[string]string{"tenant": e.Tenant}, e.OperationID, e.Principal, e.RunID, e.TraceID, e.Namespace, e.Key,
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
	Live    int64 // operations prepared, executing or unknown
	Pending int64 // approvals pending
	// Stored estimates the bytes the tenant's operations and approvals
	// hold: stored responses (headers and bodies), each operation's
	// OperationHeld and each approval's ApprovalHeld. Audit events outlive
	// their operation's purge and are counted only until it.
	Stored int64
}

// HeldPerRecord is what a row or an audit event is counted to hold
// besides the texts counted by name (its states, times, actor, reason,
// tree hashes, and the database's own overhead).
const HeldPerRecord = 256

// OperationHeld estimates the bytes an operation holds, with context the
// bytes of its key, route, target, fingerprint, principal, run id and
// trace id, and own those of its probe, business key, concurrency key and
// result reference: its row, and the audit events that copy its context,
// one for its reservation, two for an approval, and two for each attempt
// (forwarded, and its outcome). Both stores' Usage count it so (and its
// stored response besides), and the limits count a new operation by it
// before the store has it.
func OperationHeld(context, own, attempts int64) int64 {
	return own + (context+HeldPerRecord)*(3+2*attempts)
}

// ApprovalHeld estimates the bytes an approval holds, with texts the bytes
// of its key, route, target, fingerprint, summary, command, requester,
// approvers, decider and note.
func ApprovalHeld(texts int64) int64 { return texts + HeldPerRecord }

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
