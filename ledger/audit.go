package ledger

import (
	"context"
	"errors"
	"fmt"
	"io"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/idemgate/idemgate/audit"
)

// AuditLogReader is what ExportAudit reads: a tenant's sealed events and
// its signed checkpoints. A Store is one.
type AuditLogReader interface {
	AuditLog(ctx context.Context, p LogParams) ([]audit.Event, error)
	AuditCheckpoints(ctx context.Context, tenant string, after int64) ([]audit.Stored, error)
}

var _ AuditLogReader = Store(nil)

// ExportAudit writes a tenant's log as an export (docs/design.md, "Audit log"):
// its sealed events in log order, then its signed checkpoints. The
// checkpoints are read first, so that every one is within the events that
// follow, however the log grows meanwhile. It returns the events written.
// A log with an event missing is exported as it is: verifying it says so.
func ExportAudit(ctx context.Context, s AuditLogReader, tenant string, w io.Writer) (int64, error) {
	cps, err := s.AuditCheckpoints(ctx, tenant, -1)
	if err != nil {
		return 0, fmt.Errorf("export: %w", err)
	}
	x := audit.NewWriter(w)
	var n, written int64 // the next position to read, the events written
	for {
		page, err := s.AuditLog(ctx, LogParams{Tenant: tenant, From: n})
		if err != nil {
			return written, fmt.Errorf("export: %w", err)
		}
		for _, e := range page {
			// Written as stored, gaps included: verify names what is
			// missing, which an export that stopped would hide.
			if err := x.Event(e); err != nil {
				return written, fmt.Errorf("export: %w", err)
			}
			n, written = e.Seq+1, written+1
		}
		if len(page) < (LogParams{}).PageLimit() {
			break
		}
	}
	for _, c := range cps {
		if err := x.Checkpoint(c.Signed); err != nil {
			return written, fmt.Errorf("export: %w", err)
		}
	}
	return written, x.Flush()
}

// Proof is an inclusion proof of one audit event, or why there is none
// yet.
type Proof struct {
	Event audit.Event
	// Text is the proof in the C2SP tlog-proof format, against the latest
	// checkpoint; empty when the event is not yet covered by one.
	Text    []byte
	Pending string // why there is no proof yet
}

// AuditProofReader is what ProveAudit reads: an operation's events, its
// tenant's latest checkpoint, and the hashes of its tenant's tree. A
// Store is one.
type AuditProofReader interface {
	AuditEvents(ctx context.Context, p AuditParams) ([]audit.Event, error)
	LatestCheckpoint(ctx context.Context, tenant string) (*audit.Stored, error)
	AuditHashes(ctx context.Context, tenant string, indexes []int64) ([]tlog.Hash, error)
}

var _ AuditProofReader = Store(nil)

// ProveAudit proves the inclusion of an operation's events in its tenant's
// log, each against the latest signed checkpoint, checking every proof
// before it is returned.
func ProveAudit(ctx context.Context, s AuditProofReader, opID string) ([]Proof, error) {
	evs, err := operationEvents(ctx, s, opID)
	if err != nil {
		return nil, fmt.Errorf("prove: %w", err)
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("prove %s: %w", opID, ErrNotFound)
	}
	tenant := evs[0].Tenant
	latest, err := s.LatestCheckpoint(ctx, tenant)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return nil, fmt.Errorf("prove: %w", err)
	}
	hashes := tlog.HashReaderFunc(func(ix []int64) ([]tlog.Hash, error) { return s.AuditHashes(ctx, tenant, ix) })
	out := make([]Proof, 0, len(evs))
	for _, e := range evs {
		p := Proof{Event: e}
		switch {
		case e.Seq < 0:
			p.Pending = "not sealed yet"
		case latest == nil || e.Seq >= latest.Size:
			p.Pending = "sealed, not yet covered by a signed checkpoint"
		default:
			if p.Text, err = proveOne(e, *latest, hashes); err != nil {
				return nil, fmt.Errorf("prove event %d: %w", e.Seq, err)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// proveOne proves e in the tree of checkpoint c and checks the proof.
func proveOne(e audit.Event, c audit.Stored, hashes tlog.HashReader) ([]byte, error) {
	proof, err := tlog.ProveRecord(c.Size, e.Seq, hashes)
	if err != nil {
		return nil, err
	}
	leaf, err := e.LeafHash()
	if err != nil {
		return nil, err
	}
	if err := tlog.CheckRecord(proof, c.Size, c.Root, e.Seq, leaf); err != nil {
		return nil, fmt.Errorf("the store's tree does not hold this event: %w", err)
	}
	return audit.FormatProof(e.Seq, proof, c.Signed), nil
}

// auditEventReader is what operationEvents reads.
type auditEventReader interface {
	AuditEvents(ctx context.Context, p AuditParams) ([]audit.Event, error)
}

// operationEvents reads all of an operation's events, page by page: a
// busy key's replays and conflicts may be many.
func operationEvents(ctx context.Context, s auditEventReader, opID string) ([]audit.Event, error) {
	var out []audit.Event
	for after := int64(0); ; {
		page, err := s.AuditEvents(ctx, AuditParams{OperationID: opID, After: after, Limit: MaxPage})
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < MaxPage {
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}
