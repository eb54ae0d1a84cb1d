package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// unavailable fails the test under CI, where nothing may be skipped, and
// skips it elsewhere.
func unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		tb.Fatalf("%s (under CI=true this test must run: CI runs as root)", msg)
	}
	tb.Skip(msg)
}

// Tmpfs mounts a tmpfs of size bytes on a new directory and returns it; the
// test's end unmounts it. A real, small filesystem is the only honest way
// to see what a store does when its disk fills. It needs root.
func Tmpfs(tb testing.TB, size int64) string {
	tb.Helper()
	dir := tb.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10), "tmpfs", dir).CombinedOutput()
	if err != nil {
		unavailable(tb, "mount a tmpfs: %v: %s", err, out)
	}
	tb.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			tb.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// Free returns the bytes available to an unprivileged writer on dir's
// filesystem.
func Free(tb testing.TB, dir string) int64 {
	tb.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		tb.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// Fill writes a file in dir until at most leave bytes are free (0: the
// filesystem is full), and returns the function that deletes it again.
func Fill(tb testing.TB, dir string, leave int64) (free func()) {
	tb.Helper()
	path := filepath.Join(dir, "filler")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	for {
		avail := Free(tb, dir) - leave
		if avail <= 0 {
			break
		}
		n := min(int64(len(chunk)), avail)
		if _, err := f.Write(chunk[:n]); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			tb.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil && !errors.Is(err, syscall.ENOSPC) {
		tb.Fatal(err)
	}
	return func() {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			tb.Fatal(err)
		}
	}
}

// Immutable makes files unwritable even through descriptors already open
// for writing (chattr +i), which no mode bits do for root; the returned
// function (and the test's end) undoes it.
func Immutable(tb testing.TB, paths ...string) (undo func()) {
	tb.Helper()
	set := func(flag string) error {
		args := append([]string{flag}, paths...)
		if out, err := exec.Command("chattr", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("chattr %s: %v: %s", flag, err, out)
		}
		return nil
	}
	if err := set("+i"); err != nil {
		unavailable(tb, "%v", err)
	}
	var once sync.Once
	undo = func() {
		once.Do(func() {
			if err := set("-i"); err != nil {
				tb.Error(err)
			}
		})
	}
	tb.Cleanup(undo)
	return undo
}
