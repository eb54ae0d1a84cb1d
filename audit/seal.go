package audit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// Head is a tenant's log as the sealer last left it: its size, and its
// latest signed checkpoint's size and time.
type Head struct {
	Tenant         string
	Size           int64
	CheckpointSize int64
	CheckpointAt   time.Time
}

// Sealed is one event given its position in its tenant's log, with the
// tree hashes its leaf stores (tlog's layout: the leaf's own, then one per
// perfect subtree it completes).
type Sealed struct {
	ID     int64 // the event's store id
	Seq    int64
	Hashes []tlog.Hash
}

// Stored is a signed checkpoint as a store keeps it.
type Stored struct {
	Tenant string
	Checkpoint
	Signed []byte
	At     time.Time
}

// ErrForked is a checkpoint of a size the log has already signed with
// another root: the log never signs two (docs/design.md, "Audit log").
var ErrForked = errors.New("audit log: a checkpoint of this size with another root exists")

// SealTx is what one sealing round needs of a store, inside the one
// transaction in which the store lets only one sealer run (the single
// writer on SQLite, an advisory lock on PostgreSQL): every call sees the
// writes of the calls before it, and all commit together or not at all.
type SealTx interface {
	// Unsealed returns up to limit events not yet sealed, in id order:
	// committed ones only, so a gap in ids is never waited for.
	Unsealed(ctx context.Context, limit int) ([]Event, error)
	// Heads returns the heads of the given tenants (a tenant with no log
	// yet is absent) and of every tenant whose latest events are not
	// covered by a checkpoint.
	Heads(ctx context.Context, tenants []string) (map[string]Head, error)
	// ReadHashes reads stored hashes of a tenant's tree, by tlog's index.
	ReadHashes(ctx context.Context, tenant string, indexes []int64) ([]tlog.Hash, error)
	// Seal records the events' positions and hashes, and the tenants' new
	// sizes.
	Seal(ctx context.Context, events []Sealed, heads []Head) error
	// AddCheckpoint stores a signed checkpoint and makes it its tenant's
	// latest; ErrForked if its size is signed with another root.
	AddCheckpoint(ctx context.Context, c Stored) error
}

// Signing is how, and how often, a sealer signs checkpoints.
type Signing struct {
	Signer note.Signer
	Name   string        // the log's name: each tenant's origin is Name/tenant
	Every  int64         // sign once this many events are not covered
	After  time.Duration // or, when any is not, once the latest checkpoint is this old
}

// SealRound seals up to limit events in one transaction of tx's store and
// signs the checkpoints that are due, at now by the caller's clock. It
// returns the events sealed and the checkpoints signed, for the caller to
// publish once the round has committed.
func SealRound(ctx context.Context, tx SealTx, limit int, s Signing, now time.Time) (int, []Stored, error) {
	events, err := tx.Unsealed(ctx, limit)
	if err != nil {
		return 0, nil, fmt.Errorf("unsealed events: %w", err)
	}
	var tenants []string
	for _, e := range events {
		tenants = append(tenants, e.Tenant)
	}
	heads, err := tx.Heads(ctx, tenants)
	if err != nil {
		return 0, nil, fmt.Errorf("log heads: %w", err)
	}
	r := &round{tx: tx, ctx: ctx, heads: heads, fresh: map[string]map[int64]tlog.Hash{}}
	sealed, err := r.place(events)
	if err != nil {
		return 0, nil, err
	}
	if len(sealed) > 0 {
		if err := tx.Seal(ctx, sealed, r.changed()); err != nil {
			return 0, nil, fmt.Errorf("seal: %w", err)
		}
	}
	signed, err := r.sign(s, now)
	return len(sealed), signed, err
}

// round is one sealing round's state: the heads, and the hashes it has
// computed and not yet written, which tx cannot read back.
type round struct {
	ctx     context.Context
	tx      SealTx
	heads   map[string]Head
	fresh   map[string]map[int64]tlog.Hash
	touched []string
}

// place gives each event the next position in its tenant's log.
func (r *round) place(events []Event) ([]Sealed, error) {
	out := make([]Sealed, 0, len(events))
	for _, e := range events {
		h, ok := r.heads[e.Tenant]
		if !ok {
			h = Head{Tenant: e.Tenant}
		}
		if !slices.Contains(r.touched, e.Tenant) {
			r.touched = append(r.touched, e.Tenant)
		}
		e.Seq = h.Size
		leaf, err := e.LeafHash()
		if err != nil {
			return nil, fmt.Errorf("seal event %d: %w", e.ID, err)
		}
		hs, err := tlog.StoredHashesForRecordHash(e.Seq, leaf, r.reader(e.Tenant))
		if err != nil {
			return nil, fmt.Errorf("seal event %d: %w", e.ID, err)
		}
		first := tlog.StoredHashIndex(0, e.Seq)
		for i, x := range hs {
			r.fresh[e.Tenant][first+int64(i)] = x
		}
		h.Size++
		r.heads[e.Tenant] = h
		out = append(out, Sealed{ID: e.ID, Seq: e.Seq, Hashes: hs})
	}
	return out, nil
}

// changed is the heads this round grew.
func (r *round) changed() []Head {
	out := make([]Head, 0, len(r.touched))
	for _, t := range r.touched {
		out = append(out, r.heads[t])
	}
	return out
}

// reader reads a tenant's hashes: this round's first, then the store's.
func (r *round) reader(tenant string) tlog.HashReader {
	if r.fresh[tenant] == nil {
		r.fresh[tenant] = map[int64]tlog.Hash{}
	}
	fresh := r.fresh[tenant]
	return tlog.HashReaderFunc(func(indexes []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(indexes))
		var missing []int64
		for i, ix := range indexes {
			if h, ok := fresh[ix]; ok {
				out[i] = h
			} else {
				missing = append(missing, ix)
			}
		}
		if len(missing) == 0 {
			return out, nil
		}
		got, err := r.tx.ReadHashes(r.ctx, tenant, missing)
		if err != nil {
			return nil, err
		}
		for i, ix := range indexes {
			if _, ok := fresh[ix]; !ok {
				out[i], got = got[0], got[1:]
				fresh[ix] = out[i]
			}
		}
		return out, nil
	})
}

// sign signs a checkpoint for every tenant with enough events, or old
// enough ones, not covered.
func (r *round) sign(s Signing, now time.Time) ([]Stored, error) {
	if s.Signer == nil {
		return nil, nil
	}
	var out []Stored
	for _, h := range r.heads {
		due := h.Size-h.CheckpointSize >= max(s.Every, 1) || now.Sub(h.CheckpointAt) >= s.After
		if h.Size <= h.CheckpointSize || !due {
			continue
		}
		root, err := tlog.TreeHash(h.Size, r.reader(h.Tenant))
		if err != nil {
			return nil, fmt.Errorf("tree of %s at %d: %w", h.Tenant, h.Size, err)
		}
		c := Checkpoint{Origin: Origin(s.Name, h.Tenant), Size: h.Size, Root: root}
		b, err := c.Sign(s.Signer)
		if err != nil {
			return nil, err
		}
		st := Stored{Tenant: h.Tenant, Checkpoint: c, Signed: b, At: now}
		if err := r.tx.AddCheckpoint(r.ctx, st); err != nil {
			return nil, fmt.Errorf("checkpoint %s at %d: %w", h.Tenant, h.Size, err)
		}
		out = append(out, st)
	}
	return out, nil
}

// HashIndex says where a stored hash lives: in the hashes of the leaf at
// seq, at position pos.
func HashIndex(index int64) (seq int64, pos int) {
	level, n := tlog.SplitStoredHashIndex(index)
	return (n+1)<<level - 1, level
}

// JoinHashes is a leaf's stored hashes as one value, as stores keep them
// next to the event.
func JoinHashes(hs []tlog.Hash) []byte {
	b := make([]byte, 0, len(hs)*tlog.HashSize)
	for _, h := range hs {
		b = append(b, h[:]...)
	}
	return b
}
