// Package durable holds what the two examples share: the effect, a line
// appended to replies.txt, something idemgate cannot forward and a retry
// would repeat.
package durable

import (
	"bufio"
	"cmp"
	"fmt"
	"os"
)

// Ticket is the reply's command.
type Ticket struct {
	ID      string `json:"id"`
	Version int    `json:"version"`
}

// Sent is the reply's result: which line of replies.txt it is.
type Sent struct {
	Line int `json:"line"`
}

// File is where the replies go.
const File = "replies.txt"

// Append is the effect: one line in File.
func Append(t Ticket) (Sent, error) {
	f, err := os.OpenFile(File, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return Sent{}, err
	}
	if _, err := fmt.Fprintf(f, "reply to ticket %s v%d\n", t.ID, t.Version); err != nil {
		f.Close()
		return Sent{}, err
	}
	if err := f.Close(); err != nil {
		return Sent{}, err
	}
	return Sent{Line: Lines()}, nil
}

// Lines counts the replies in File.
func Lines() int {
	f, err := os.Open(File)
	if err != nil {
		return 0
	}
	defer f.Close()
	n := 0
	for sc := bufio.NewScanner(f); sc.Scan(); {
		n++
	}
	return n
}

// Env is the environment variable name's value, or def.
func Env(name, def string) string { return cmp.Or(os.Getenv(name), def) }
