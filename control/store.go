package control

import (
	"context"
	"time"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

// Store is what the control plane reads and changes: operations, their
// history and effects, the owner steps of actions, approvals and their
// decisions, resolutions, and
// the audit log's checkpoints and export. Both stores implement it (it is
// part of ledger.Store).
type Store interface {
	Get(ctx context.Context, id string) (*ledger.Operation, error)
	GetByKey(ctx context.Context, k ledger.OpKey) (*ledger.Operation, error)
	List(ctx context.Context, p ledger.ListParams) (ledger.Page, error)
	History(ctx context.Context, id string) ([]ledger.Event, error)
	Effects(ctx context.Context, k ledger.OpKey) ([]*ledger.Effect, error)
	GetApproval(ctx context.Context, id string) (*ledger.Approval, error)
	ListApprovals(ctx context.Context, p ledger.ApprovalListParams) (ledger.ApprovalPage, error)

	Heartbeat(ctx context.Context, l ledger.Lease, d time.Duration) (ledger.Lease, error)
	Complete(ctx context.Context, l ledger.Lease, o ledger.Outcome) (*ledger.Operation, error)
	Release(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error)
	MarkUnknown(ctx context.Context, l ledger.Lease, n ledger.Note) (*ledger.Operation, error)
	Resolve(ctx context.Context, p ledger.ResolveParams) (*ledger.Operation, error)
	ResolveEffect(ctx context.Context, p ledger.EffectResolveParams) (*ledger.Effect, error)
	Approve(ctx context.Context, p ledger.DecisionParams) (*ledger.Approval, error)
	Deny(ctx context.Context, p ledger.DecisionParams) (*ledger.Approval, error)

	LatestCheckpoint(ctx context.Context, tenant string) (*audit.Stored, error)
	ledger.AuditLogReader
}
