package agent

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestJournalIsPrivate (issue 34): a new journal file is 0600, whatever
// the umask lets through: it holds the keys that prove an agent's
// intents, and SQLite gives its -wal and -shm files the main file's mode.
// The Python client's is too (clients/python test_journal).
func TestJournalIsPrivate(t *testing.T) {
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	path := filepath.Join(t.TempDir(), "journal.db")
	j, err := OpenJournal(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, p := range []string{path, path + "-wal"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if mode := fi.Mode().Perm(); mode != 0o600 {
			t.Errorf("%s: mode %o, want 600", filepath.Base(p), mode)
		}
	}
}
