package sqlite_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/ledger/storetest"
	"github.com/idemgate/idemgate/store/sqlite"
)

// answer is a stored response large enough that a full disk shows.
var answer = &ledger.Response{Status: 201, Body: bytes.Repeat([]byte("x"), 8<<10)}

// TestFullDisk, on a real tmpfs filled to the last byte, with no floor: a
// step either commits and is kept, or fails as unavailable and leaves
// nothing. No reservation the store acknowledged is lost, none it refused
// appears, and service comes back when space does.
func TestFullDisk(t *testing.T) {
	t.Parallel()
	c := context.Background()
	dir := testenv.Tmpfs(t, 16<<20)
	path := filepath.Join(dir, "ledger.db")
	s := open(t, path, sqlite.Options{MinFree: -1})
	free := testenv.Fill(t, dir, 0)
	var kept, refused []string
	completed := map[string]bool{}
	for i := 0; len(refused) < 20 && i < 2000; i++ {
		p := storetest.Params(time.Minute)
		r, err := s.Reserve(c, p)
		if err != nil {
			wantUnavailable(t, "reserve on a full disk", err)
			refused = append(refused, p.Key)
			continue
		}
		kept = append(kept, p.Key)
		if _, err := s.Complete(c, *r.Lease, ledger.Outcome{State: ledger.Succeeded, Response: answer}); err != nil {
			wantUnavailable(t, "complete on a full disk", err)
			continue
		}
		completed[p.Key] = true
	}
	if len(refused) == 0 {
		t.Fatal("the disk never filled: every reservation succeeded")
	}
	free()
	waitReady(t, s)
	s.Close()
	s = open(t, path, sqlite.Options{MinFree: -1}) // what is on disk, not in this process
	for _, key := range kept {
		op, err := s.GetByKey(c, ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients, Key: key})
		if err != nil {
			t.Fatalf("acknowledged reservation %s lost: %v", key, err)
		}
		if completed[key] && (op.State != ledger.Succeeded || !bytes.Equal(op.Response.Body, answer.Body)) {
			t.Fatalf("acknowledged completion of %s lost: %s", key, op.State)
		}
	}
	for _, key := range refused {
		if op, err := s.GetByKey(c, ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
			Key: key}); !errors.Is(err, ledger.ErrNotFound) {
			t.Fatalf("refused reservation %s exists: %+v, %v", key, op, err)
		}
	}
	t.Logf("%d reservations kept (%d completed), %d refused", len(kept), len(completed), len(refused))
	storetest.Reserved(t, s)
}

// TestFreeSpaceFloor: below the floor, new operations are refused before
// anything is written and readiness fails, while replays and the
// completions of operations already running go on; above it again,
// service comes back by itself.
func TestFreeSpaceFloor(t *testing.T) {
	t.Parallel()
	c := context.Background()
	dir := testenv.Tmpfs(t, 96<<20)
	s := open(t, filepath.Join(dir, "ledger.db"), sqlite.Options{MinFree: 64 << 20})
	running := storetest.Reserved(t, s)
	done := storetest.Reserved(t, s)
	final, err := s.Complete(c, *done.Lease, ledger.Outcome{State: ledger.Succeeded, Response: answer})
	if err != nil {
		t.Fatal(err)
	}
	free := testenv.Fill(t, dir, 32<<20)
	wantUnavailable(t, "ping below the floor", s.Ping(c))
	p := storetest.Params(time.Minute)
	if _, err := s.Reserve(c, p); !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("a new key below the floor: %v, want unavailable", err)
	}
	replay := storetest.Params(time.Minute)
	replay.Key = final.Key
	if r, err := s.Reserve(c, replay); err != nil || r.Created || r.Op.State != ledger.Succeeded {
		t.Fatalf("a replay below the floor: %+v, %v", r, err)
	}
	if _, err := s.Complete(c, *running.Lease, ledger.Outcome{State: ledger.Succeeded, Response: answer}); err != nil {
		t.Fatalf("a completion below the floor: %v", err)
	}
	free()
	waitReady(t, s)
	if _, err := s.GetByKey(c, ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
		Key: p.Key}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the key refused below the floor was reserved: %v", err)
	}
	storetest.Reserved(t, s)
}

// TestReadOnlyFile: a store file that cannot be written (chattr +i, which
// binds root too, even through open descriptors) is unavailable, nothing
// is reserved, and service comes back once it can be written again.
func TestReadOnlyFile(t *testing.T) {
	t.Parallel()
	c := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := open(t, path, sqlite.Options{})
	storetest.Reserved(t, s)
	undo := testenv.Immutable(t, path, path+"-wal")
	p := storetest.Params(time.Minute)
	_, err := s.Reserve(c, p)
	wantUnavailable(t, "reserve on a read-only file", err)
	wantUnavailable(t, "ping on a read-only file", s.Ping(c))
	undo()
	waitReady(t, s)
	if _, err := s.GetByKey(c, ledger.OpKey{Tenant: "acme", Namespace: ledger.NamespaceClients,
		Key: p.Key}); !errors.Is(err, ledger.ErrNotFound) {
		t.Fatalf("the key refused on a read-only file was reserved: %v", err)
	}
	storetest.Reserved(t, s)
}

// TestDeletedFile: once its file is deleted, SQLite would go on writing to
// an inode nobody will find again; the store refuses instead.
func TestDeletedFile(t *testing.T) {
	t.Parallel()
	c := context.Background()
	path := filepath.Join(t.TempDir(), "ledger.db")
	s := open(t, path, sqlite.Options{})
	storetest.Reserved(t, s)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, err := s.Reserve(c, storetest.Params(time.Minute))
	wantUnavailable(t, "reserve after the file was deleted", err)
	wantUnavailable(t, "ping after the file was deleted", s.Ping(c))
}

func wantUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, ledger.ErrUnavailable) {
		t.Fatalf("%s: %v, want %v", what, err, ledger.ErrUnavailable)
	}
}

// waitReady waits for the store to pass Ping again by itself.
func waitReady(t *testing.T, s ledger.Store) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := s.Ping(context.Background())
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not come back: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
