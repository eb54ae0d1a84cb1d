package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sqlitedrv "modernc.org/sqlite"

	"github.com/idemgate/idemgate/internal/dbtest"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/ledger/storetest"
	"github.com/idemgate/idemgate/store/sqlite"
)

// mu guards paths and businessDBs: the conformance suite's subtests run
// in parallel.
var mu sync.Mutex

// paths remembers which file each store was opened on, for Another.
var paths = map[ledger.Store]string{}

func open(tb testing.TB, path string, opts sqlite.Options) *sqlite.Store {
	tb.Helper()
	s := dbtest.SQLiteAt(tb, path, opts)
	mu.Lock()
	defer mu.Unlock()
	paths[s] = path
	return s
}

// pathOf is the file s was opened on.
func pathOf(s ledger.Store) string {
	mu.Lock()
	defer mu.Unlock()
	return paths[s]
}

// commits counts the write transactions committed by every connection the
// driver opens in these tests.
var commits atomic.Int64

func init() {
	sqlitedrv.RegisterConnectionHook(func(c sqlitedrv.ExecQuerierContext, _ string) error {
		c.(sqlitedrv.HookRegisterer).RegisterCommitHook(func() int32 { commits.Add(1); return 0 })
		return nil
	})
}

// The conformance suite runs with the production default, synchronous=FULL.
var backend = storetest.Backend{
	Commits: commits.Load,
	// A fresh store is a copy of dbtest's migrated template, which its
	// own Migrate finds up to date: the suite makes some 170 stores (100
	// for Model alone), and under -race migrating each from nothing was
	// half its time. Migrating a new file is tested where a file is new:
	// TestRaceProcesses, TestOddPath, the driver's and the faults' tests.
	Fresh: func(tb testing.TB) ledger.Store {
		return open(tb, filepath.Join(tb.TempDir(), "ledger.db"), sqlite.Options{})
	},
	Another: func(tb testing.TB, s ledger.Store) ledger.Store { return open(tb, pathOf(s), sqlite.Options{}) },
	Begin:   begin,
	Rows: func(tb testing.TB, s ledger.Store, id string) (n int) {
		if err := business(tb, s).QueryRow(`SELECT count(*) FROM biz WHERE id = ?`, id).Scan(&n); err != nil {
			tb.Fatal(err)
		}
		return n
	},
}

// businessDBs is each store's business handle: a service's own database
// handle on the store's file, as a Go service keeps its data beside the
// ledger.
var businessDBs = map[ledger.Store]*sql.DB{}

func business(tb testing.TB, s ledger.Store) *sql.DB {
	mu.Lock()
	defer mu.Unlock()
	if db, ok := businessDBs[s]; ok {
		return db
	}
	db, err := sql.Open("sqlite", "file:"+paths[s]+"?_pragma=busy_timeout(10000)&_txlock=immediate")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		db.Close()
		mu.Lock()
		defer mu.Unlock()
		delete(businessDBs, s)
	})
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS biz (id TEXT PRIMARY KEY)`); err != nil {
		tb.Fatal(err)
	}
	businessDBs[s] = db
	return db
}

// begin opens a business transaction with the store's steps bound to it.
func begin(tb testing.TB, s ledger.Store) storetest.Tx {
	tx, err := business(tb, s).Begin()
	if err != nil {
		tb.Fatal(err)
	}
	return storetest.Tx{Steps: s.(*sqlite.Store).Tx(tx),
		Write: func(id string) error {
			_, err := tx.Exec(`INSERT INTO biz (id) VALUES (?)`, id)
			return err
		},
		Commit: tx.Commit, Rollback: tx.Rollback}
}

func TestConformance(t *testing.T) { storetest.Run(t, backend) }

func openMigrated(ctx context.Context, dsn string) (ledger.Store, error) {
	s, err := sqlite.Open(ctx, dsn, sqlite.Options{})
	if err != nil {
		return nil, err
	}
	return s, s.Migrate(ctx)
}

func TestMain(m *testing.M) {
	if storetest.IsChild() {
		storetest.Child(openMigrated)
		return
	}
	m.Run()
}

// TestRaceProcesses: two OS processes open one new file, migrate it and race
// for the same keys at the same moment.
func TestRaceProcesses(t *testing.T) {
	t.Parallel()
	storetest.RaceProcesses(t, filepath.Join(t.TempDir(), "shared.db"), 2)
}

// TestOddPath: a file name with the characters a URI reads as syntax.
func TestOddPath(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a?b#c%20d.db")
	// Opened here, not by dbtest, which would make the file itself first.
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	dbtest.Migrated(t, s, err)
	if _, err := s.Reserve(context.Background(), storetest.Params(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the store is not at the path given: %v", err)
	}
}

// TestWALStaysBounded: checkpoints keep resetting the write-ahead log. An
// INSERT … RETURNING reset before it is stepped to the end (as QueryRow
// does) pins the log, which then grows with every commit, and commits slow
// down with it. The test waits for the event, not for a count: it runs
// lifecycles until the log restarts from its beginning (its header's
// checkpoint sequence changes), which takes about a hundred here; a
// pinned log never restarts, and by the cap it has grown far past the
// bound (some 40 KiB a lifecycle).
func TestWALStaysBounded(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "wal.db")
	s := open(t, path, sqlite.Options{Synchronous: "OFF"})
	c := context.Background()
	first := uint32(0)
	for n := 1; ; n++ {
		r, err := s.Reserve(c, storetest.Params(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded,
			Response: &ledger.Response{Status: 201, Body: []byte(`{"id":1}`)}}); err != nil {
			t.Fatal(err)
		}
		seq := walCheckpointSeq(t, path+"-wal")
		if n == 1 {
			first = seq
		}
		if seq != first {
			break // the log restarted
		}
		if n == 3000 {
			t.Fatalf("the WAL did not restart in 3,000 lifecycles: it is never reset")
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		t.Fatal(err)
	}
	// The default auto-checkpoint runs at 1,000 pages (4 MiB).
	if fi.Size() > 8<<20 {
		t.Fatalf("WAL is %d MiB: it is not reset at the auto-checkpoint", fi.Size()>>20)
	}
}

// walCheckpointSeq is the checkpoint sequence number in a write-ahead
// log's header (bytes 12-15, big-endian), which SQLite increments each
// time the log restarts from its beginning.
func walCheckpointSeq(t *testing.T, path string) uint32 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var h [16]byte
	if _, err := io.ReadFull(f, h[:]); err != nil {
		t.Fatal(err)
	}
	return binary.BigEndian.Uint32(h[12:16])
}

// TestGroupCommit (not in parallel: it counts the commits of every store
// in the process): steps that wait for the writer together share one
// commit. Another connection holds the write lock while 50 reservations,
// then 50 completions, queue; once it lets go, each 50 commit in at most
// two transactions (the first batch may have left before the others
// arrived), and every one of them is there, with its history.
func TestGroupCommit(t *testing.T) {
	const n = 50
	c := context.Background()
	path := filepath.Join(t.TempDir(), "group.db")
	s := open(t, path, sqlite.Options{})
	lock := lockFile(t, path)
	leases := make([]ledger.Lease, n)
	before := commits.Load()
	parallel(t, n, func(i int) error {
		r, err := s.Reserve(c, storetest.Params(time.Minute))
		if err == nil {
			leases[i] = *r.Lease
		}
		return err
	}, func() { waitPending(t, s, n); lock.release() })
	if got := commits.Load() - before; got > 2 {
		t.Errorf("%d concurrent reservations took %d commits, want at most 2", n, got)
	}
	lock = lockFile(t, path)
	before = commits.Load()
	parallel(t, n, func(i int) error {
		_, err := s.Complete(c, leases[i], ledger.Outcome{State: ledger.Succeeded, Response: &ledger.Response{Status: 201}})
		return err
	}, func() { waitPending(t, s, n); lock.release() })
	if got := commits.Load() - before; got > 2 {
		t.Errorf("%d concurrent completions took %d commits, want at most 2", n, got)
	}
	for _, l := range leases {
		if h, err := s.History(c, l.OpID); err != nil || len(h) != 2 || h[1].To != ledger.Succeeded {
			t.Fatalf("history of %s: %+v, %v", l.OpID, h, err)
		}
	}
}

// parallel runs fn(0..n-1) at once, calls meanwhile() while they run, and
// fails on the first error.
func parallel(t *testing.T, n int, fn func(i int) error, meanwhile func()) {
	t.Helper()
	errs := make(chan error, n)
	for i := range n {
		go func() { errs <- fn(i) }()
	}
	meanwhile()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func waitPending(t *testing.T, s *sqlite.Store, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for sqlite.Pending(s) < n {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d steps queued", sqlite.Pending(s), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// heldLock is another connection's write transaction on a store file.
type heldLock struct{ release func() }

func lockFile(t *testing.T, path string) heldLock {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	return heldLock{release: func() {
		_, _ = conn.ExecContext(context.Background(), "ROLLBACK")
		conn.Close()
		db.Close()
	}}
}

// TestStoreFilesArePrivate (issue 24, 7.16): the store holds stored
// answers and approval commands; its file, and the -wal and -shm files
// SQLite makes beside it (with the main file's mode), are created 0600
// whatever the umask allows.
func TestStoreFilesArePrivate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "private.db")
	// Opened here, not by dbtest, which would make the file itself first.
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	dbtest.Migrated(t, s, err)
	storetest.Reserved(t, s) // a write: the WAL and its index exist
	for _, f := range []string{path, path + "-wal", path + "-shm"} {
		info, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if mode := info.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(f), mode)
		}
	}
}

// TestCommitsSyncData: a store commits with fdatasync, which writes what
// a WAL commit needs (the data and the file's size) without the
// timestamps fsync also forces out, the system call SQLite's own Linux
// builds use. The library's default is fsync until a store is opened.
func TestCommitsSyncData(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("fdatasync is the library's choice on Linux only")
	}
	open(t, filepath.Join(t.TempDir(), "idem.db"), sqlite.Options{})
	if !sqlitedrv.FdatasyncEnabled() {
		t.Fatal("after Open, SQLite still commits with fsync")
	}
}
