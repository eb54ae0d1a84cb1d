// Package testenv finds what the tests need outside the module, the
// PostgreSQL server, and decides whether a missing one is a skip (a
// developer's machine) or a failure (CI=true).
package testenv

import "os"

// InCI reports whether the tests run under CI, where nothing may be skipped.
func InCI() bool {
	v := os.Getenv("CI")
	return v != "" && v != "false" && v != "0"
}
