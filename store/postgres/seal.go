package postgres

import (
	"context"

	"fmt"

	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/idemgate/idemgate/audit"
)

// sealerLock is the advisory lock that makes one sealer at a time, per
// schema: gateways that share a database may each run one.
const sealerLock = `SELECT pg_try_advisory_xact_lock(hashtextextended(current_schema() || '.idem_audit_sealer', 0))`

// SealAudit implements ledger.Store: fn runs in one transaction holding
// the sealer's advisory lock, or not at all when another holds it.
func (s *Store) SealAudit(ctx context.Context, fn func(audit.SealTx) error) (bool, error) {
	ran := false
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, sealerLock).Scan(&ran); err != nil || !ran {
			return err
		}
		return fn(sealTx{tx: tx})
	})
	return ran && err == nil, mapErr("seal audit log", err)
}

// sealTx is audit.SealTx in the sealer's transaction.
type sealTx struct{ tx pgx.Tx }

func (t sealTx) Unsealed(ctx context.Context, limit int) ([]audit.Event, error) {
	return events(ctx, t.tx, `SELECT `+auditColumns+` FROM idem_audit_events WHERE seq IS NULL ORDER BY id LIMIT $1`,
		limit)
}

func (t sealTx) Heads(ctx context.Context, tenants []string) (map[string]audit.Head, error) {
	rows, err := t.tx.Query(ctx, `SELECT tenant, size, checkpoint_size, checkpoint_at FROM idem_audit_heads
		WHERE size > checkpoint_size OR tenant = ANY($1)`, tenants)
	if err != nil {
		return nil, err
	}
	hs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (audit.Head, error) {
		var h audit.Head
		err := r.Scan(&h.Tenant, &h.Size, &h.CheckpointSize, &h.CheckpointAt)
		return h, err
	})
	out := map[string]audit.Head{}
	for _, h := range hs {
		out[h.Tenant] = h
	}
	return out, err
}

func (t sealTx) ReadHashes(ctx context.Context, tenant string, indexes []int64) ([]tlog.Hash, error) {
	return readHashes(ctx, t.tx, tenant, indexes)
}

// readHashes reads stored hashes from the leaves that hold them, in one
// query.
func readHashes(ctx context.Context, q querier, tenant string, indexes []int64) ([]tlog.Hash, error) {
	seqs := make([]int64, len(indexes))
	for i, ix := range indexes {
		seqs[i], _ = audit.HashIndex(ix)
	}
	rows, err := q.Query(ctx, `SELECT seq, hashes FROM idem_audit_events WHERE tenant = $1 AND seq = ANY($2)`,
		tenant, seqs)
	if err != nil {
		return nil, err
	}
	bySeq := map[int64][]byte{}
	var seq int64
	var hs []byte
	_, err = pgx.ForEachRow(rows, []any{&seq, &hs}, func() error {
		bySeq[seq] = append([]byte(nil), hs...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]tlog.Hash, len(indexes))
	for i, ix := range indexes {
		seq, pos := audit.HashIndex(ix)
		b := bySeq[seq]
		if len(b) < (pos+1)*tlog.HashSize {
			return nil, fmt.Errorf("hash %d of %s's log is not stored", ix, tenant)
		}
		copy(out[i][:], b[pos*tlog.HashSize:])
	}
	return out, nil
}

// sealSQL gives a round's events their positions and hashes in one
// statement; the seq guard keeps a sealed event sealed.
const sealSQL = `UPDATE idem_audit_events e SET seq = v.seq, hashes = v.hashes
	FROM unnest($1::bigint[], $2::bigint[], $3::bytea[]) AS v(id, seq, hashes)
	WHERE e.id = v.id AND e.seq IS NULL`

func (t sealTx) Seal(ctx context.Context, sealed []audit.Sealed, heads []audit.Head) error {
	ids, seqs, hashes := make([]int64, len(sealed)), make([]int64, len(sealed)), make([][]byte, len(sealed))
	for i, e := range sealed {
		ids[i], seqs[i], hashes[i] = e.ID, e.Seq, audit.JoinHashes(e.Hashes)
	}
	tag, err := t.tx.Exec(ctx, sealSQL, ids, seqs, hashes)
	if err != nil {
		return err
	}
	if tag.RowsAffected() != int64(len(sealed)) {
		return fmt.Errorf("sealed %d of %d events: another sealer ran", tag.RowsAffected(), len(sealed))
	}
	tenants, sizes := make([]string, len(heads)), make([]int64, len(heads))
	for i, h := range heads {
		tenants[i], sizes[i] = h.Tenant, h.Size
	}
	_, err = t.tx.Exec(ctx, `INSERT INTO idem_audit_heads (tenant, size)
		SELECT * FROM unnest($1::text[], $2::bigint[]) ON CONFLICT (tenant) DO UPDATE SET size = excluded.size`,
		tenants, sizes)
	return err
}

func (t sealTx) AddCheckpoint(ctx context.Context, c audit.Stored) error {
	var root []byte
	err := t.tx.QueryRow(ctx, `WITH ins AS (
		INSERT INTO idem_audit_checkpoints (tenant, size, root, signed, at) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT DO NOTHING RETURNING root
	) SELECT root FROM ins UNION ALL
	SELECT root FROM idem_audit_checkpoints WHERE tenant = $1 AND size = $2 AND NOT EXISTS (SELECT 1 FROM ins)`,
		c.Tenant, c.Size, c.Root[:], string(c.Signed), c.At).Scan(&root)
	switch {
	case err != nil:
		return err
	case string(root) != string(c.Root[:]):
		return audit.ErrForked
	}
	_, err = t.tx.Exec(ctx, `UPDATE idem_audit_heads SET checkpoint_size = $2, checkpoint_at = $3 WHERE tenant = $1`,
		c.Tenant, c.Size, c.At)
	return err
}
