//go:build !linux

package main

import (
	"os"
	"testing"
)

// openPTY is Linux's alone here: the test that needs a terminal skips.
func openPTY(t *testing.T) (keyboard, tty *os.File) {
	t.Skip("a pseudo-terminal is opened on Linux only")
	return nil, nil
}
