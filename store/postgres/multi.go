package postgres

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// A batch's reservations, and its completions, each merge into one
// statement over arrays: on the server a statement costs more to start
// and finish than the row it writes, and a batch of fifteen reservations
// as one statement takes less than half the time of fifteen statements,
// even pipelined. Every other step keeps its own statement. A merged
// statement answers for each step with the row its own statement would
// have returned, or with none (its guard, or a conflict on its key,
// refused it): the caller cannot tell the difference.

// merge says whether a step's statement may merge with others of its
// kind, and how.
type merge int

const (
	single    merge = iota
	reserves        // reserveSQL: one row per new operation
	completes       // completeSQL: one row per completed operation
)

// multiReserveSQL is reserveSQL for many operations. Rows are inserted in
// (tenant, namespace, key) order, so that two batches wait on each other's keys in
// one order. Only inserted operations are returned; a step whose key (or
// business or concurrency key) is taken gets no row, and reads the holder
// after the batch, as when reserveSQL's snapshot could not see it.
var multiReserveSQL = `WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::integer[],
		$8::text[], $9::bigint[], $10::text[], $11::text[], $12::bigint[], $13::text[], $14::text[], $15::text[],
		$16::text[], $17::text[], $18::text[], $19::text[], $20::text[], $21::text[], $22::text[])
		AS i(id, tenant, key, route, fingerprint, state, attempts, owner_token, lease_us, business_key,
			concurrency_key, retention_us, actor, reason, principal, target, run_id, trace_id, probe, namespace, kind,
			fingerprint_rules)
), ins AS (
	INSERT INTO idem_operations (id, tenant, key, route, fingerprint, state, attempts, owner_token, fence,
		lease_until, business_key, concurrency_key, retention_us, created_at, updated_at, expires_at,
		principal, target, run_id, trace_id, probe, namespace, kind, fingerprint_rules)
	SELECT id, tenant, key, route, fingerprint, state, attempts, owner_token, attempts,
		CASE WHEN lease_us > 0 THEN statement_timestamp() + lease_us * interval '1 microsecond' END,
		business_key, concurrency_key, retention_us, statement_timestamp(), statement_timestamp(), statement_timestamp() + retention_us * interval '1 microsecond',
		principal, target, run_id, trace_id, probe, namespace, kind, fingerprint_rules
	FROM input ORDER BY tenant, namespace, key
	ON CONFLICT DO NOTHING
	RETURNING ` + opColumns + `
), hist AS (
	` + recorded("ins", "NULL::text", "ins.state", "ins.created_at", "input.actor", "input.reason") + `
	FROM ins JOIN input USING (id)
)
SELECT true, ` + opColumns + `, false FROM ins`

// multiCompleteSQL is completeSQL for many operations, each with its own
// guard (source state, owner token and fence).
var multiCompleteSQL = `WITH input AS (
	SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bigint[],
		$8::integer[], $9::bytea[], $10::bytea[], $11::text[], $12::text[], $13::text[])
		AS i(id, from_state, to_state, actor, reason, owner_token, fence, response_status, response_headers,
			response_body, result_ref, last_error, response_sha256)
), up AS (
	UPDATE idem_operations o SET state = i.to_state, updated_at = statement_timestamp(),
		expires_at = statement_timestamp() + o.retention_us * interval '1 microsecond', lease_until = NULL,
		response_status = i.response_status, response_headers = i.response_headers, response_body = i.response_body,
		result_ref = i.result_ref, last_error = i.last_error, response_sha256 = i.response_sha256
	FROM input i
	WHERE o.id = i.id AND o.state = i.from_state AND o.owner_token = i.owner_token AND o.fence = i.fence
	RETURNING ` + qualified("o", opColumnsNoBody) + `
), hist AS (
	` + recorded("up", "i.from_state", "up.state", "up.updated_at", "i.actor", "i.reason") + `
	FROM up JOIN input i USING (id)
)
SELECT ` + opColumns + ` FROM up`

// qualified prefixes each plain column of a column list with table.
func qualified(table, columns string) string {
	parts := strings.Split(columns, ",")
	for i, p := range parts {
		if p = strings.TrimSpace(p); !strings.Contains(p, " ") {
			parts[i] = table + "." + p
		}
	}
	return strings.Join(parts, ", ")
}

// idColumn is where each merged statement's rows carry the operation id.
var idColumn = map[merge]int{reserves: 1, completes: 0}

// mergedArgs turns the single statements' arguments of writes into the
// merged statement's arrays: argument i of every write becomes array i, a
// slice of that argument's Go type (a nil pointer is a NULL element).
func mergedArgs(writes []*write) []any {
	out := make([]any, len(writes[0].args))
	for i, first := range writes[0].args {
		col := reflect.MakeSlice(reflect.SliceOf(reflect.TypeOf(first)), 0, len(writes))
		for _, w := range writes {
			col = reflect.Append(col, reflect.ValueOf(w.args[i]))
		}
		out[i] = col.Interface()
	}
	return out
}

// statement is one statement of a batch: a step's own, or a merged one.
type statement struct {
	kind   merge
	writes []*write
}

// statements groups a batch: the steps that merge, by kind, each group of
// two or more as one statement; every other step alone, in order.
func statements(batch []*write) []statement {
	var out []statement
	groups := map[merge]int{} // kind → index in out
	for _, w := range batch {
		if w.merge == single {
			out = append(out, statement{writes: []*write{w}})
			continue
		}
		if i, ok := groups[w.merge]; ok {
			out[i].writes = append(out[i].writes, w)
			out[i].kind = w.merge
			continue
		}
		groups[w.merge] = len(out)
		out = append(out, statement{writes: []*write{w}})
	}
	return out
}

// merged reports whether any statement of sts is a merged one.
func merged(sts []statement) bool {
	for _, st := range sts {
		if st.kind != single {
			return true
		}
	}
	return false
}

// query is the statement's SQL and arguments.
func (st statement) query() (string, []any) {
	switch st.kind {
	case reserves:
		return multiReserveSQL, mergedArgs(st.writes)
	case completes:
		return multiCompleteSQL, mergedArgs(st.writes)
	}
	return st.writes[0].query, st.writes[0].args
}

// readMerged reads a merged statement's rows and gives each write its
// own, or pgx.ErrNoRows.
func readMerged(st statement, rows pgx.Rows, types *pgtype.Map) error {
	byID := map[string][][]byte{}
	for rows.Next() {
		raw := rows.RawValues()
		values := make([][]byte, len(raw))
		for i, v := range raw {
			if v != nil {
				values[i] = append([]byte{}, v...)
			}
		}
		byID[string(values[idColumn[st.kind]])] = values
	}
	fields := append([]pgconn.FieldDescription(nil), rows.FieldDescriptions()...)
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, w := range st.writes {
		values, ok := byID[w.args[0].(string)]
		if !ok {
			w.err = pgx.ErrNoRows
			continue
		}
		w.err = w.scan(rawRow{types: types, fields: fields, values: values})
	}
	return nil
}

// rawRow is one row of a merged statement, as a step's own statement
// would have returned it.
type rawRow struct {
	types  *pgtype.Map
	fields []pgconn.FieldDescription
	values [][]byte
}

func (r rawRow) Scan(dest ...any) error {
	if err := pgx.ScanRow(r.types, r.fields, r.values, dest...); err != nil {
		return fmt.Errorf("scan merged row: %w", err)
	}
	return nil
}
