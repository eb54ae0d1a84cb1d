package agent

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/oklog/ulid/v2"
	_ "modernc.org/sqlite" // the journal's driver, as the ledger's
)

// applicationID marks a SQLite file as an idemgate journal ("idmj"), so
// that another program's database is refused rather than written into.
const applicationID = 0x69646d6a

// timeFormat is fixed-width UTC, so that times compare as text.
const timeFormat = "2006-01-02T15:04:05.000000000Z"

const journalSchema = `
CREATE TABLE IF NOT EXISTS intents (
	name         TEXT NOT NULL,
	version      INTEGER NOT NULL,
	key          TEXT NOT NULL UNIQUE,
	method       TEXT NOT NULL,
	path         TEXT NOT NULL,
	fingerprint  TEXT NOT NULL,
	attempts     INTEGER NOT NULL DEFAULT 0,
	last_kind    TEXT NOT NULL DEFAULT '',
	last_status  INTEGER NOT NULL DEFAULT 0,
	operation_id TEXT NOT NULL DEFAULT '',
	created_at   TEXT NOT NULL,
	updated_at   TEXT NOT NULL,
	PRIMARY KEY (name, version)
);
CREATE TABLE IF NOT EXISTS attempts (
	key        TEXT NOT NULL,
	n          INTEGER NOT NULL,
	started_at TEXT NOT NULL,
	kind       TEXT NOT NULL DEFAULT '',
	status     INTEGER NOT NULL DEFAULT 0,
	sent       TEXT NOT NULL DEFAULT 'maybe',
	PRIMARY KEY (key, n)
);`

// addSentColumn brings a journal made before attempts.sent up to date. Its
// attempts stay "maybe" unless the gateway answered them: an old journal
// cannot tell a refused connection from a lost answer.
const addSentColumn = `ALTER TABLE attempts ADD COLUMN sent TEXT NOT NULL DEFAULT 'maybe';
UPDATE attempts SET sent = 'yes' WHERE status > 0;`

// Journal is the agent's durable memory of its intents: each intent's key
// is written here before the first request that carries it is sent, so a
// restarted agent resumes the same key instead of making a new one. It is
// one SQLite file; several processes may share it.
type Journal struct {
	db   *sql.DB
	path string
	run  string // the process run: see Run
}

// Entry is one version of an intent, as the journal knows it.
type Entry struct {
	Intent      string    `json:"intent"`
	Version     int       `json:"version"`
	Key         string    `json:"key"`
	Method      string    `json:"method"`
	Path        string    `json:"path"`
	Fingerprint string    `json:"fingerprint"`
	Attempts    int       `json:"attempts"`
	LastKind    Kind      `json:"last_kind,omitempty"`
	LastStatus  int       `json:"last_status,omitempty"`
	OperationID string    `json:"operation_id,omitempty"`
	Sent        Sent      `json:"sent"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// OpenJournal opens (creating if needed) the journal at path. A file that
// is not a journal, or not a database at all, is an error naming it.
func OpenJournal(ctx context.Context, path string) (*Journal, error) {
	// A new journal is created 0600, empty (an empty database to SQLite),
	// before SQLite opens it: it holds the keys that prove an agent's
	// intents, and SQLite gives its -wal and -shm files the main file's
	// mode. An existing file keeps its mode; a failure here is SQLite's to
	// report as it opens the file.
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"+
		"&_pragma=synchronous(FULL)&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	j := &Journal{db: db, path: path, run: "run_" + ulid.Make().String()}
	if err := j.init(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("journal %s: %w", path, err)
	}
	return j, nil
}

func (j *Journal) init(ctx context.Context) error {
	tx, err := j.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var appID, tables int
	if err := tx.QueryRowContext(ctx, `PRAGMA application_id`).Scan(&appID); err != nil {
		return err
	}
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master`).Scan(&tables); err != nil {
		return err
	}
	switch {
	case appID == 0 && tables == 0:
		if _, err := tx.ExecContext(ctx, fmt.Sprintf(`PRAGMA application_id = %d`, applicationID)); err != nil {
			return err
		}
	case appID != applicationID:
		return errors.New("not an idemgate journal (another program's database)")
	}
	if _, err := tx.ExecContext(ctx, journalSchema); err != nil {
		return err
	}
	var hasSent int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('attempts') WHERE name = 'sent'`).
		Scan(&hasSent); err != nil {
		return err
	}
	if hasSent == 0 {
		if _, err := tx.ExecContext(ctx, addSentColumn); err != nil {
			return fmt.Errorf("add attempts.sent: %w", err)
		}
	}
	return tx.Commit()
}

// Close closes the file.
func (j *Journal) Close() error { return j.db.Close() }

// Path is the journal's file.
func (j *Journal) Path() string { return j.path }

// Run is the journal's process run: an agent run id ("run_" and a ULID)
// made when this journal was opened, which a Client whose Run is empty
// sends as Idempotency-Run. It names this process's use of the journal,
// so that the gateway's audit log tells two runs sharing one journal, or
// one process restarted, apart; it is not stored in the file.
func (j *Journal) Run() string { return j.run }

// Sent says whether a request of an intent may have reached the gateway,
// so that "failed" can say whether anything left and a resume knows what
// "the gateway holds nothing" means.
type Sent string

// What the journal knows of an intent's requests.
const (
	// SentNo: none reached the gateway (each was refused before it was
	// written, or the gateway later said it holds nothing under the key):
	// nothing can have happened.
	SentNo Sent = "no"
	// SentMaybe: one left with no answer recorded (lost, or the process
	// died), and the gateway could not yet say whether it arrived.
	SentMaybe Sent = "maybe"
	// SentYes: the gateway received one: it answered, or holds an
	// operation under the key.
	SentYes Sent = "yes"
)

// sentOf is the SQL for an intent's Sent, from its attempts and from the
// operation id only the gateway can have named.
const sentOf = `CASE WHEN i.operation_id != '' OR EXISTS (SELECT 1 FROM attempts a WHERE a.key = i.key AND a.sent = 'yes')
	THEN 'yes' WHEN EXISTS (SELECT 1 FROM attempts a WHERE a.key = i.key AND a.sent = 'maybe') THEN 'maybe' ELSE 'no' END`

const entryColumns = `i.name, i.version, i.key, i.method, i.path, i.fingerprint, i.attempts, i.last_kind, i.last_status,
	i.operation_id, ` + sentOf + `, i.created_at, i.updated_at`

func scanEntry(row interface{ Scan(...any) error }) (*Entry, error) {
	var e Entry
	var created, updated string
	err := row.Scan(&e.Intent, &e.Version, &e.Key, &e.Method, &e.Path, &e.Fingerprint, &e.Attempts, &e.LastKind,
		&e.LastStatus, &e.OperationID, &e.Sent, &created, &updated)
	if err != nil {
		return nil, err
	}
	e.CreatedAt, _ = time.Parse(timeFormat, created)
	e.UpdatedAt, _ = time.Parse(timeFormat, updated)
	return &e, nil
}

// ErrNoIntent is returned for an intent the journal has never seen.
var ErrNoIntent = errors.New("no such intent in the journal")

// Latest returns the newest version of the named intent.
func (j *Journal) Latest(ctx context.Context, name string) (*Entry, error) {
	e, err := scanEntry(j.db.QueryRowContext(ctx, `SELECT `+entryColumns+` FROM intents i WHERE i.name = ?
		ORDER BY i.version DESC LIMIT 1`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("intent %q: %w", name, ErrNoIntent)
	}
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	return e, nil
}

// ByOperation returns the entry whose request the gateway named opID.
func (j *Journal) ByOperation(ctx context.Context, opID string) (*Entry, error) {
	e, err := scanEntry(j.db.QueryRowContext(ctx, `SELECT `+entryColumns+` FROM intents i WHERE operation_id = ?`, opID))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("operation %q: %w", opID, ErrNoIntent)
	}
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	return e, nil
}

// recentWith returns the newest unnamed intent (one Prepare named
// "intent-…") created since then whose request has the fingerprint fp.
func (j *Journal) recentWith(ctx context.Context, fp string, since time.Time) (*Entry, error) {
	e, err := scanEntry(j.db.QueryRowContext(ctx, `SELECT `+entryColumns+` FROM intents i
		WHERE fingerprint = ? AND created_at >= ? AND name LIKE 'intent-%'
		AND version = (SELECT max(version) FROM intents WHERE name = i.name)
		ORDER BY created_at DESC LIMIT 1`, fp, since.UTC().Format(timeFormat)))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, ErrNoIntent
	}
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	return e, nil
}

// Holds says whether the journal holds the named intent or, with steps,
// a step of it ("<name>/…"), whatever their versions.
func (j *Journal) Holds(ctx context.Context, name string, steps bool) (bool, error) {
	var n int
	err := j.db.QueryRowContext(ctx, `SELECT count(*) FROM intents WHERE name = ? OR (? AND name LIKE ? ESCAPE '\')`,
		name, steps, escapeLike(name)+"/%").Scan(&n)
	if err != nil {
		return false, fmt.Errorf("journal %s: %w", j.path, err)
	}
	return n > 0, nil
}

// openWith returns the oldest intent (its latest version) whose request
// has the fingerprint fp and which may still take effect: sent, and
// unknown, in progress, waiting for approval, or never recorded.
func (j *Journal) openWith(ctx context.Context, fp string) (*Entry, error) {
	e, err := scanEntry(j.db.QueryRowContext(ctx, `SELECT `+entryColumns+` FROM intents i
		WHERE fingerprint = ? AND attempts > 0 AND last_kind IN ('', 'unknown', 'in_progress', 'needs_approval')
		AND version = (SELECT max(version) FROM intents WHERE name = i.name)
		ORDER BY created_at LIMIT 1`, fp))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	return e, nil
}

// Pending lists the latest versions of intents still open, oldest first:
// those whose last outcome is not final (never sent, in progress, unknown,
// awaiting approval), and those failed before the gateway ever answered
// (unreachable, or "not now" past the budget: no status on record), which
// a resume may still perform.
func (j *Journal) Pending(ctx context.Context) ([]*Entry, error) {
	rows, err := j.db.QueryContext(ctx, `SELECT `+entryColumns+` FROM intents i
		WHERE version = (SELECT max(version) FROM intents WHERE name = i.name)
		AND (last_kind NOT IN ('created', 'replayed', 'conflict', 'rejected', 'unauthorized', 'failed')
			OR (last_kind = 'failed' AND last_status = 0))
		ORDER BY created_at, name`)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	defer rows.Close()
	var out []*Entry
	for rows.Next() {
		e, err := scanEntry(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}

// keyFunc makes the key of a new version of an intent; nil makes 128
// random bits.
type keyFunc func(intent string, version int) string

func (f keyFunc) key(intent string, version int) string {
	if f == nil {
		return newKey()
	}
	return f(intent, version)
}

// create inserts a version of an intent with the key keyOf makes for it.
// Two processes creating the same version at once get the same row: the
// first one's.
func (j *Journal) create(ctx context.Context, e Entry, keyOf keyFunc) (*Entry, error) {
	now := time.Now().UTC().Format(timeFormat)
	_, err := j.db.ExecContext(ctx, `INSERT INTO intents (name, version, key, method, path, fingerprint, created_at,
		updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name, version) DO NOTHING`,
		e.Intent, e.Version, keyOf.key(e.Intent, e.Version), e.Method, e.Path, e.Fingerprint, now, now)
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	got, err := scanEntry(j.db.QueryRowContext(ctx, `SELECT `+entryColumns+` FROM intents i WHERE name = ? AND version = ?`,
		e.Intent, e.Version))
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	return got, nil
}

// createRepeat inserts a new intent "<name>#<n>", n the first free
// number, with the key keyOf makes for it, in one transaction: two
// processes repeating at once get two.
func (j *Journal) createRepeat(ctx context.Context, e Entry, keyOf keyFunc) (*Entry, error) {
	tx, err := j.db.BeginTx(ctx, nil) // immediate: the write lock first
	if err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	defer tx.Rollback()
	base, _, _ := strings.Cut(e.Intent, "#")
	family := escapeLike(base) + "#%"
	var open string
	err = tx.QueryRowContext(ctx, `SELECT name || ' is ' || coalesce(nullif(last_kind, ''), 'unrecorded') FROM intents i WHERE (name = ? OR name LIKE ? ESCAPE '\')
		AND version = (SELECT max(version) FROM intents WHERE name = i.name) AND attempts > 0
		AND last_kind NOT IN ('created', 'replayed', 'conflict', 'rejected', 'unauthorized', 'failed') LIMIT 1`,
		base, family).Scan(&open)
	if err == nil {
		return nil, fmt.Errorf("intent %s: %w", open, ErrNotSettled)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	var n int
	if err := tx.QueryRowContext(ctx, `SELECT count(DISTINCT name) FROM intents WHERE name = ? OR name LIKE ? ESCAPE '\'`,
		base, family).Scan(&n); err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	now := time.Now().UTC().Format(timeFormat)
	e.Intent, e.Version = fmt.Sprintf("%s#%d", base, n+1), 1
	if _, err := tx.ExecContext(ctx, `INSERT INTO intents (name, version, key, method, path, fingerprint, created_at,
		updated_at) VALUES (?, 1, ?, ?, ?, ?, ?, ?)`, e.Intent, keyOf.key(e.Intent, 1), e.Method, e.Path, e.Fingerprint, now,
		now); err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("journal %s: %w", j.path, err)
	}
	return j.Latest(ctx, e.Intent)
}

func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}

// lastSentAttempt returns when the intent's latest attempt that may have
// reached the gateway started (zero if none may have).
func (j *Journal) lastSentAttempt(ctx context.Context, key string) (time.Time, error) {
	var at sql.NullString
	if err := j.db.QueryRowContext(ctx, `SELECT max(started_at) FROM attempts WHERE key = ? AND sent != 'no'`, key).
		Scan(&at); err != nil {
		return time.Time{}, fmt.Errorf("journal %s: %w", j.path, err)
	}
	if !at.Valid {
		return time.Time{}, nil
	}
	return time.Parse(timeFormat, at.String)
}

// settle takes the gateway's word on the attempts under key that may have
// reached it: they did (it holds the operation, whose state says what
// became of them), or they did not (it holds nothing under the key).
func (j *Journal) settle(ctx context.Context, key string, sent Sent) error {
	if _, err := j.db.ExecContext(ctx, `UPDATE attempts SET sent = ? WHERE key = ? AND sent = 'maybe'`, sent, key); err != nil {
		return fmt.Errorf("journal %s: %w", j.path, err)
	}
	return nil
}

// beginAttempt records an attempt before it is sent, and returns its
// number: one transaction, one wait for the disk.
func (j *Journal) beginAttempt(ctx context.Context, key string) (int, error) {
	var n int
	err := j.tx(ctx, func(tx *sql.Tx, now string) error {
		err := tx.QueryRowContext(ctx, `UPDATE intents SET attempts = attempts + 1, updated_at = ? WHERE key = ?
			RETURNING attempts`, now, key).Scan(&n)
		if err == nil {
			_, err = tx.ExecContext(ctx, `INSERT INTO attempts (key, n, started_at) VALUES (?, ?, ?)`, key, n, now)
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("journal %s: record attempt: %w", j.path, err)
	}
	return n, nil
}

// record stores attempt n's outcome (n 0: the gateway was only asked, which
// changes no status), sent being what the attempt tells of its delivery,
// and returns the intent as the journal now holds it. The outcome becomes the intent's latest only
// if it says more than what the journal holds: a known success is never
// replaced by a later, lesser answer (another process's in_progress), and
// an attempt whose answer told nothing of the operation (not reached,
// rate-limited) does not replace a real answer. Such an attempt after
// earlier ones that may have reached the gateway, whose answers were never
// recorded (a crash) and of which the gateway has not said since, leaves
// the intent unknown, not failed: one of them may have been applied.
func (j *Journal) record(ctx context.Context, key string, n int, o Outcome, reached bool, sent Sent) (*Entry, error) {
	const keep = `((last_kind IN ('created', 'replayed') AND ?1 NOT IN ('created', 'replayed')) OR (NOT ?2 AND last_kind != ''))`
	var e *Entry
	err := j.tx(ctx, func(tx *sql.Tx, now string) error {
		if n > 0 {
			if _, err := tx.ExecContext(ctx, `UPDATE attempts SET kind = ?, status = ?, sent = ? WHERE key = ? AND n = ?`,
				o.Kind, o.Status, sent, key, n); err != nil {
				return err
			}
		}
		_, err := tx.ExecContext(ctx, `UPDATE intents SET
			last_kind = CASE WHEN `+keep+` THEN last_kind WHEN NOT ?2 AND EXISTS (SELECT 1 FROM attempts
				WHERE key = ?7 AND n != ?3 AND sent = 'maybe') THEN 'unknown' ELSE ?1 END,
			last_status = CASE WHEN `+keep+` OR NOT ?2 OR ?3 = 0 THEN last_status ELSE ?4 END,
			operation_id = CASE WHEN ?5 = '' THEN operation_id ELSE ?5 END, updated_at = ?6 WHERE key = ?7`,
			o.Kind, reached, n, o.Status, o.OperationID, now, key)
		if err == nil {
			e, err = scanEntry(tx.QueryRowContext(ctx, `SELECT `+entryColumns+` FROM intents i WHERE i.key = ?`, key))
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("journal %s: record outcome: %w", j.path, err)
	}
	return e, nil
}

// tx runs fn in one immediate transaction, with the time as text.
func (j *Journal) tx(ctx context.Context, fn func(tx *sql.Tx, now string) error) error {
	tx, err := j.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx, time.Now().UTC().Format(timeFormat)); err != nil {
		return err
	}
	return tx.Commit()
}

// newKey is 128 random bits, URL-safe.
func newKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}
