// Package testenv finds what the tests need outside the module: the shared
// test data and the PostgreSQL server, and decides whether a missing one is a
// skip (a developer's machine) or a failure (CI=true).
package testenv

import (
	"os"
	"path/filepath"
	"testing"
)

// InCI reports whether the tests run under CI, where nothing may be skipped.
func InCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}

// SharedDir returns the project's ../shared folder (beside the module root),
// where the RFC 8785 vectors live. A missing folder fails the test: the
// vectors are part of the contract, not an optional extra.
func SharedDir(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("testenv: no go.mod above the working directory")
		}
		dir = parent
	}
	shared := filepath.Join(filepath.Dir(dir), "shared")
	if _, err := os.Stat(shared); err != nil {
		t.Fatalf("testenv: the shared test data must be at %s: %v", shared, err)
	}
	return shared
}
