package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"golang.org/x/mod/sumdb/tlog"

	"github.com/idemgate/idemgate/audit"
)

// SealAudit implements ledger.Store. fn reads what it needs on the
// readers, which see what has committed, and its writes are kept; they
// are then made by one step of the single writer, which commits them with
// the batch it joins, or not at all, if the sealer's watermark has not
// moved since: only then did no other sealer (another process on the
// file) seal meanwhile. Reading, hashing and signing so stay off the
// writer, which every request waits for; it only applies the round.
func (s *Store) SealAudit(ctx context.Context, fn func(audit.SealTx) error) (bool, error) {
	t := &sealTx{q: s.read}
	if err := queryRow(ctx, s.read, `SELECT last_id FROM idem_audit_sealer`).Scan(&t.mark); err != nil {
		return false, mapErr("seal audit log", err)
	}
	if err := fn(t); err != nil {
		return false, mapErr("seal audit log", err)
	}
	if len(t.writes) == 0 {
		return true, nil
	}
	ran, err := step(s, ctx, durable, func(ctx context.Context, d driver) (bool, error) {
		var mark int64
		if err := queryRow(ctx, d.q, `SELECT last_id FROM idem_audit_sealer`).Scan(&mark); err != nil || mark != t.mark {
			return false, err // another sealer moved it: this round is void
		}
		for _, w := range t.writes {
			if err := w(ctx, d.q); err != nil {
				return false, err
			}
		}
		return true, nil
	})
	return ran, mapErr("seal audit log", err)
}

// sealTx is audit.SealTx reading on q (the readers) from the watermark
// mark, and keeping its writes for the writer.
type sealTx struct {
	q      querier
	mark   int64
	writes []func(context.Context, querier) error
}

// exec is a statement the writer will run; run on the writer's connection.
func exec(ctx context.Context, q querier, query string, args ...any) (sql.Result, error) {
	return q.(*writeConn).ExecContext(ctx, query, args...)
}

// unsealedSQL reads the events past the sealer's watermark: the writer
// assigns ids in commit order, so those are the unsealed ones (see
// migration 0006).
const unsealedSQL = `SELECT ` + auditColumns + ` FROM idem_audit_events
	WHERE id > ? AND seq IS NULL ORDER BY id LIMIT ?`

func (t *sealTx) Unsealed(ctx context.Context, limit int) ([]audit.Event, error) {
	return events(ctx, t.q, unsealedSQL, t.mark, limit)
}

func (t *sealTx) Heads(ctx context.Context, tenants []string) (map[string]audit.Head, error) {
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

func (t *sealTx) ReadHashes(ctx context.Context, tenant string, indexes []int64) ([]tlog.Hash, error) {
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

// sealSQL gives a round's events their positions and hashes in one
// statement, from a JSON array of [id, seq, hex hashes], and moves the
// watermark past them.
const sealSQL = `UPDATE idem_audit_events AS e SET seq = v.value ->> 1, hashes = unhex(v.value ->> 2)
	FROM json_each(?1) AS v WHERE e.id = v.value ->> 0 AND e.seq IS NULL`

func (t *sealTx) Seal(_ context.Context, sealed []audit.Sealed, heads []audit.Head) error {
	rows := make([]byte, 0, len(sealed)*160)
	rows = append(rows, '[')
	for i, e := range sealed {
		if i > 0 {
			rows = append(rows, ',')
		}
		rows = fmt.Appendf(rows, `[%d,%d,"%x"]`, e.ID, e.Seq, audit.JoinHashes(e.Hashes))
	}
	json, last := string(append(rows, ']')), sealed[len(sealed)-1].ID
	t.writes = append(t.writes, func(ctx context.Context, q querier) error {
		res, err := exec(ctx, q, sealSQL, json)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n != int64(len(sealed)) {
			return errors.Join(err, fmt.Errorf("sealed %d of %d events: another sealer ran", n, len(sealed)))
		}
		_, err = exec(ctx, q, `UPDATE idem_audit_sealer SET last_id = ?`, last)
		return err
	}, t.heads(heads))
	return nil
}

// heads is the write of the tenants' new sizes.
func (t *sealTx) heads(heads []audit.Head) func(context.Context, querier) error {
	return func(ctx context.Context, q querier) error {
		for _, h := range heads {
			if _, err := exec(ctx, q, `INSERT INTO idem_audit_heads (tenant, size) VALUES (?, ?)
			ON CONFLICT (tenant) DO UPDATE SET size = excluded.size`, h.Tenant, h.Size); err != nil {
				return err
			}
		}
		return nil
	}
}

// AddCheckpoint keeps the checkpoint for the writer, which refuses a
// second root for its size: the round then fails whole.
func (t *sealTx) AddCheckpoint(_ context.Context, c audit.Stored) error {
	t.writes = append(t.writes, func(ctx context.Context, q querier) error { return addCheckpoint(ctx, q, c) })
	return nil
}

func addCheckpoint(ctx context.Context, q querier, c audit.Stored) error {
	var root []byte
	err := queryRow(ctx, q, `INSERT INTO idem_audit_checkpoints (tenant, size, root, signed, at)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING root`, c.Tenant, c.Size, c.Root[:], string(c.Signed),
		c.At.UnixMicro()).Scan(&root)
	if errors.Is(err, sql.ErrNoRows) { // that size is signed already
		err = queryRow(ctx, q, `SELECT root FROM idem_audit_checkpoints WHERE tenant = ? AND size = ?`, c.Tenant,
			c.Size).Scan(&root)
		if err == nil && string(root) != string(c.Root[:]) {
			return audit.ErrForked
		}
	}
	if err != nil {
		return err
	}
	_, err = exec(ctx, q, `UPDATE idem_audit_heads SET checkpoint_size = ?, checkpoint_at = ? WHERE tenant = ?`,
		c.Size, c.At.UnixMicro(), c.Tenant)
	return err
}
