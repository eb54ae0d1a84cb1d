// Package sqlite is the embedded ledger.Store: one file, no server, no cgo
// (modernc.org/sqlite). WAL lets readers run beside the single writer
// connection, through which every step goes. The writer is a group
// committer: the steps waiting for it share one IMMEDIATE transaction and
// one commit, so each is atomic, none is acknowledged before it is on disk
// (synchronous=FULL by default), and concurrent callers pay for one disk
// wait between them.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemgate/idemgate/internal/size"
	"github.com/idemgate/idemgate/internal/steps"
	"github.com/idemgate/idemgate/ledger"
)

var _ ledger.Store = (*Store)(nil)

// Store is a ledger.Store on one SQLite file.
type Store struct {
	// Steps are the ledger's steps, run by the writer (see writerExec).
	steps.Steps
	path    string
	w       *writer
	write   *sql.DB // the writer's pool: the one connection w holds
	read    *sql.DB
	reads   *readPool
	now     func() time.Time
	sync    string // the configured synchronous mode
	relaxed bool
	minFree int64 // free-space floor in bytes; 0: none
	files   []fileID
	commits ledger.CommitCounter // the writer's batches
}

// CommitStats implements ledger.Store: the writer's batches, each one
// transaction and one commit.
func (s *Store) CommitStats() ledger.CommitStats { return s.commits.Stats() }

// fileID is a file of the store as it was when opened.
type fileID struct {
	path string
	info os.FileInfo
}

// DefaultMinFree is the free-space floor below which new reservations are
// refused: well before the disk is full, so that what is in flight can
// still be recorded.
const DefaultMinFree = 64 << 20

// Options tune Open.
type Options struct {
	// Synchronous is SQLite's synchronous pragma: FULL (default) makes every
	// commit durable before it is acknowledged; NORMAL may lose the last
	// commits on power loss (never on a process crash); OFF is for tests.
	// Below FULL the store is relaxed, whatever Relaxed says: it cannot
	// promise that an answer survives every crash.
	Synchronous string
	// Relaxed (durability=relaxed) lets a batch made only of owner steps
	// (completions, releases) commit without waiting for the disk: a power
	// loss may then turn an answered operation unknown, never into a
	// second effect. Reservations always wait. Never the default.
	Relaxed bool
	// MinFree is the free-space floor in bytes (0: DefaultMinFree; negative:
	// no floor). Below it new operations are refused as unavailable, while
	// replays and the completions of operations in flight go on.
	MinFree int64
	// Readers bounds the read connections (default 4).
	Readers int
	// BusyTimeout is how long a writer waits for another process's write
	// lock (default 10s).
	BusyTimeout time.Duration
	// MustExist refuses to create the file: for commands that only read.
	MustExist bool
}

// ParseDSN reads "sqlite:PATH[?synchronous=MODE&durability=strict|relaxed&min_free=SIZE]"
// (a bare path is accepted; min_free=0 turns the floor off).
func ParseDSN(dsn string) (path string, opts Options, err error) {
	rest := strings.TrimPrefix(dsn, "sqlite:")
	path, query, _ := strings.Cut(rest, "?")
	if path == "" {
		return "", opts, errors.New("sqlite: empty path in dsn")
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return "", opts, fmt.Errorf("sqlite: dsn query: %w", err)
	}
	for k := range q {
		if !slices.Contains([]string{"synchronous", "durability", "min_free"}, k) {
			return "", opts, fmt.Errorf("sqlite: unknown dsn parameter %q (known: synchronous, durability, min_free)", k)
		}
	}
	opts.Synchronous = q.Get("synchronous")
	switch d := q.Get("durability"); d {
	case "":
	case "strict":
		if weak(strings.ToUpper(opts.Synchronous)) {
			return "", opts, fmt.Errorf("sqlite: durability=strict needs synchronous=FULL, not %s", opts.Synchronous)
		}
	case "relaxed":
		opts.Relaxed = true
	default:
		return "", opts, fmt.Errorf("sqlite: durability %q: want strict or relaxed", d)
	}
	if v := q.Get("min_free"); v != "" {
		n, err := size.Parse(v)
		if err != nil {
			return "", opts, fmt.Errorf("sqlite: min_free: %w", err)
		}
		opts.MinFree = n
		if n == 0 {
			opts.MinFree = -1
		}
	}
	return path, opts, nil
}

var synchronousModes = []string{"OFF", "NORMAL", "FULL", "EXTRA"}

// weak reports whether a synchronous mode may acknowledge a commit that a
// power loss would undo.
func weak(mode string) bool { return mode == "OFF" || mode == "NORMAL" }

// syncData makes SQLite commit with fdatasync(2) instead of fsync(2),
// process-wide, once.
//
// Why: fdatasync writes a file's data and the metadata needed to read it
// back, its size included; it skips the timestamps, which fsync also forces
// to the disk (through the journal, on ext4). A WAL commit needs nothing
// more, so its durability is the same, and it waits less: SQLite's own
// builds use fdatasync on Linux; the transpiled library keeps the source's
// default, fsync, unless told (modernc.org/sqlite.Fdatasync). Where the
// call is unavailable (macOS, Windows) SQLite keeps its own sync.
var syncData = sync.OnceFunc(func() { _, _ = sqlite.Fdatasync(true) })

// Open opens (creating if needed) the database file at path. It does not
// migrate; call Migrate.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	syncData()
	mode := strings.ToUpper(opts.Synchronous)
	if mode == "" {
		mode = "FULL"
	}
	if !slices.Contains(synchronousModes, mode) {
		return nil, fmt.Errorf("sqlite: synchronous %q: want one of %v", opts.Synchronous, synchronousModes)
	}
	if opts.MustExist {
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("sqlite: no store at %s: %w", path, ledger.ErrNoSchema)
		}
	}
	setDefaults(&opts)
	createPrivate(path)
	s := &Store{path: path, now: func() time.Time { return time.Now().UTC().Truncate(time.Microsecond) },
		sync: mode, relaxed: opts.Relaxed || weak(mode), minFree: max(opts.MinFree, 0)}
	s.Steps = steps.On(writerExec{s})
	if err := s.open(ctx, opts); err != nil {
		return nil, err
	}
	if err := patiently(ctx, opts.BusyTimeout, s.answers); err != nil {
		s.Close()
		return nil, err
	}
	s.files = identify(path, path+"-wal")
	return s, nil
}

// createPrivate creates the store's file, empty (an empty database to
// SQLite), with mode 0600, unless it exists: it holds stored answers and
// approval commands, and SQLite gives its -wal and -shm files the main
// file's mode. An existing file keeps the mode its owner gave it. A
// failure is left for SQLite to report as it opens the file, in its words.
func createPrivate(path string) {
	if f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600); err == nil {
		f.Close()
	}
}

func setDefaults(o *Options) {
	if o.Readers <= 0 {
		o.Readers = 4
	}
	if o.BusyTimeout <= 0 {
		o.BusyTimeout = 10 * time.Second
	}
	if o.MinFree == 0 {
		o.MinFree = DefaultMinFree
	}
}

// open opens both pools and hands the writer its connection.
func (s *Store) open(ctx context.Context, opts Options) error {
	base := "file:" + uriPath.Replace(s.path) + "?_pragma=busy_timeout(" + fmt.Sprint(opts.BusyTimeout.Milliseconds()) + ")" +
		"&_pragma=journal_mode(WAL)&_pragma=synchronous(" + s.sync + ")"
	var err error
	if s.write, err = sql.Open("sqlite", base); err != nil {
		return fmt.Errorf("sqlite: open: %w", err)
	}
	s.write.SetMaxOpenConns(1)
	if s.read, err = sql.Open("sqlite", base+"&_pragma=query_only(1)"); err != nil {
		s.write.Close()
		return fmt.Errorf("sqlite: open: %w", err)
	}
	s.read.SetMaxOpenConns(opts.Readers)
	s.reads = newReadPool(s.read)
	var conn *sql.Conn
	err = patiently(ctx, opts.BusyTimeout, func(ctx context.Context) (err error) {
		conn, err = s.write.Conn(ctx)
		return mapErr("open", err)
	})
	if err != nil {
		s.read.Close()
		s.write.Close()
		return err
	}
	s.w = newWriter(s, conn, s.relaxed)
	return nil
}

// uriPath escapes what a file: URI would read as syntax in a path.
var uriPath = strings.NewReplacer("%", "%25", "?", "%3f", "#", "%23")

// patiently runs fn until it succeeds, retrying while another process
// holds the file: switching a new database to WAL does not wait on the busy
// handler, so two processes creating one store at once can collide.
func patiently(ctx context.Context, patience time.Duration, fn func(context.Context) error) error {
	deadline := time.Now().Add(patience)
	for wait := 5 * time.Millisecond; ; wait = min(wait*2, 200*time.Millisecond) {
		err := fn(ctx)
		if err == nil || !errors.Is(err, ledger.ErrUnavailable) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
	}
}

// answers checks that the writer and a reader answer, before the schema
// may exist.
func (s *Store) answers(ctx context.Context) error {
	if _, err := step(s, ctx, durable, func(ctx context.Context, d driver) (struct{}, error) {
		var one int
		return struct{}{}, mapErr("ping", queryRow(ctx, d.q, "SELECT 1").Scan(&one))
	}); err != nil {
		return err
	}
	return mapErr("ping", s.read.PingContext(ctx))
}

// healthSQL is the write Ping makes: one row, rewritten, committed like
// any step.
const healthSQL = `INSERT INTO idem_health (id, checked_at) VALUES (1, ` + nowUS + `)
	ON CONFLICT (id) DO UPDATE SET checked_at = excluded.checked_at RETURNING checked_at`

// Ping checks that the store can do its work: a reader answers, and a
// write commits, to this very file, above the free-space floor. While
// any of that fails it is ErrUnavailable, and readiness says so.
func (s *Store) Ping(ctx context.Context) error {
	_, err := step(s, ctx, durable, func(ctx context.Context, d driver) (struct{}, error) {
		var at int64
		if err := queryRow(ctx, d.q, healthSQL).Scan(&at); err != nil {
			return struct{}{}, mapErr("ping: write", err)
		}
		if d.low {
			return struct{}{}, s.floorError()
		}
		return struct{}{}, nil
	})
	if err != nil {
		return err
	}
	return mapErr("ping: read", s.read.PingContext(ctx))
}

// Close stops the writer after its batch in progress and closes both pools.
func (s *Store) Close() error {
	return errors.Join(s.w.close(), s.reads.close(), s.write.Close(), s.read.Close())
}

// identify records the store's files as they are now (a missing one is
// not recorded).
func identify(paths ...string) []fileID {
	var out []fileID
	for _, p := range paths {
		if fi, err := os.Stat(p); err == nil {
			out = append(out, fileID{path: p, info: fi})
		}
	}
	return out
}

// checkFile refuses to write once a file of the store has been deleted or
// replaced: SQLite would go on writing to the unlinked inode, and every
// answer given from then on would vanish with the process.
func (s *Store) checkFile() error {
	for _, f := range s.files {
		fi, err := os.Stat(f.path)
		if err != nil || !os.SameFile(fi, f.info) {
			return fmt.Errorf("%w: store file %s was deleted or replaced while open", ledger.ErrUnavailable, f.path)
		}
	}
	return nil
}

// belowFloor reports whether the store's filesystem has less free space
// than the floor.
func (s *Store) belowFloor() bool {
	if s.minFree <= 0 {
		return false
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(s.path), &st); err != nil {
		return true // a filesystem that cannot say is not one to fill
	}
	return int64(st.Bavail)*int64(st.Bsize) < s.minFree
}

// errBelowFloor marks the refusal of a new operation or effect below the
// free-space floor: made before anything is written, it is the step's own
// answer, and the steps sharing its batch commit as if it were not there.
var errBelowFloor = errors.New("below the free-space floor")

func (s *Store) floorError() error {
	return fmt.Errorf("%w: %w: free space on the store's disk is below %d MiB; new operations are refused",
		ledger.ErrUnavailable, errBelowFloor, s.minFree>>20)
}

// mapErr turns driver errors into domain errors at the store boundary.
func mapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	var se *sqlite.Error
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return fmt.Errorf("%s: %w", op, ledger.ErrNotFound)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, sql.ErrConnDone), err.Error() == "sql: database is closed": // database/sql exports no sentinel
		return fmt.Errorf("%s: %w: %w", op, ledger.ErrUnavailable, err)
	case errors.As(err, &se) && strings.Contains(se.Error(), "idem_operations.concurrency_key"):
		return fmt.Errorf("%s: %w", op, ledger.ErrConcurrencyLocked)
	case errors.As(err, &se) && strings.Contains(se.Error(), "no such table"):
		return fmt.Errorf("%s: %w", op, ledger.ErrNoSchema)
	case errors.As(err, &se):
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR,
			sqlite3.SQLITE_FULL, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM, sqlite3.SQLITE_NOMEM,
			sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_NOLFS,
			sqlite3.SQLITE_INTERRUPT, sqlite3.SQLITE_ABORT:
			return fmt.Errorf("%s: %w: %w", op, ledger.ErrUnavailable, err)
		case sqlite3.SQLITE_CONSTRAINT, sqlite3.SQLITE_MISMATCH, sqlite3.SQLITE_TOOBIG, sqlite3.SQLITE_RANGE:
			return fmt.Errorf("%s: %w: %w", op, ledger.ErrInvalid, err)
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Relaxed reports whether the store may acknowledge a commit before it is
// on disk: opened with durability=relaxed, or with synchronous below FULL.
func (s *Store) Relaxed() bool { return s.relaxed }
