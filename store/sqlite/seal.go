package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/idemgate/idemgate/audit"
)

// SealAudit implements ledger.Store: fn runs as one step of the single
// writer, so there is one sealer at a time, and its round commits with
// the batch it joins, or not at all.
func (s *Store) SealAudit(ctx context.Context, fn func(audit.SealTx) error) (bool, error) {
	_, err := step(s, ctx, durable, func(ctx context.Context, d driver) (struct{}, error) {
		return struct{}{}, fn(sealTx{q: d.q.(*writeConn)})
	})
	return err == nil, mapErr("seal audit log", err)
}

// sealTx is audit.SealTx on the writer's connection.
type sealTx struct{ q *writeConn }

func (t sealTx) Unsealed(ctx context.Context, limit int) ([]audit.Event, error) {
	return events(ctx, t.q, `SELECT `+auditColumns+` FROM idem_audit_events WHERE seq IS NULL ORDER BY id LIMIT ?`,
		limit)
}

func (t sealTx) Heads(ctx context.Context, tenants []string) (map[string]audit.Head, error) {
	out := map[string]audit.Head{}
	scan := func(r *sql.Rows) error {
		var h audit.Head
		var at int64
		err := r.Scan(&h.Tenant, &h.Size, &h.CheckpointSize, &at)
		h.CheckpointAt = fromMicro(at)
		out[h.Tenant] = h
		return err
	}
	const cols = `SELECT tenant, size, checkpoint_size, checkpoint_at FROM idem_audit_heads`
	if err := eachRow(ctx, t.q, cols+` WHERE size > checkpoint_size`, nil, scan); err != nil {
		return nil, err
	}
	for _, tenant := range tenants {
		if _, ok := out[tenant]; ok {
			continue
		}
		if err := eachRow(ctx, t.q, cols+` WHERE tenant = ?`, []any{tenant}, scan); err != nil {
			return nil, err
		}
		if _, ok := out[tenant]; !ok { // looked up once per round
			out[tenant] = audit.Head{Tenant: tenant}
		}
	}
	return out, nil
}

func (t sealTx) ReadHashes(ctx context.Context, tenant string, indexes []int64) ([]tlog.Hash, error) {
	return readHashes(ctx, t.q, tenant, indexes)
}

// readHashes reads stored hashes from the leaves that hold them.
func readHashes(ctx context.Context, q querier, tenant string, indexes []int64) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, len(indexes))
	for i, ix := range indexes {
		seq, pos := audit.HashIndex(ix)
		var hs []byte
		err := queryRow(ctx, q, `SELECT hashes FROM idem_audit_events WHERE tenant = ? AND seq = ?`, tenant, seq).
			Scan(&hs)
		if errors.Is(err, sql.ErrNoRows) || err == nil && len(hs) < (pos+1)*tlog.HashSize {
			return nil, fmt.Errorf("hash %d of %s's log is not stored", ix, tenant)
		}
		if err != nil {
			return nil, err
		}
		copy(out[i][:], hs[pos*tlog.HashSize:])
	}
	return out, nil
}

func (t sealTx) Seal(ctx context.Context, sealed []audit.Sealed, heads []audit.Head) error {
	for _, e := range sealed {
		if _, err := t.q.ExecContext(ctx, `UPDATE idem_audit_events SET seq = ?, hashes = ? WHERE id = ? AND seq IS NULL`,
			e.Seq, audit.JoinHashes(e.Hashes), e.ID); err != nil {
			return err
		}
	}
	for _, h := range heads {
		if _, err := t.q.ExecContext(ctx, `INSERT INTO idem_audit_heads (tenant, size) VALUES (?, ?)
			ON CONFLICT (tenant) DO UPDATE SET size = excluded.size`, h.Tenant, h.Size); err != nil {
			return err
		}
	}
	return nil
}

func (t sealTx) AddCheckpoint(ctx context.Context, c audit.Stored) error {
	var root []byte
	err := queryRow(ctx, t.q, `INSERT INTO idem_audit_checkpoints (tenant, size, root, signed, at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING root`, c.Tenant, c.Size, c.Root[:], string(c.Signed),
		c.At.UnixMicro()).Scan(&root)
	if errors.Is(err, sql.ErrNoRows) { // that size is signed already
		err = queryRow(ctx, t.q, `SELECT root FROM idem_audit_checkpoints WHERE tenant = ? AND size = ?`, c.Tenant,
			c.Size).Scan(&root)
		if err == nil && string(root) != string(c.Root[:]) {
			return audit.ErrForked
		}
	}
	if err != nil {
		return err
	}
	_, err = t.q.ExecContext(ctx, `UPDATE idem_audit_heads SET checkpoint_size = ?, checkpoint_at = ? WHERE tenant = ?`,
		c.Size, c.At.UnixMicro(), c.Tenant)
	return err
}
