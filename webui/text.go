package webui

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// show writes text from a request or a store as a person must read it:
// every character that is not printable (controls, bidi overrides such as
// U+202E, zero-width and other format characters, invalid UTF-8) is
// written as its escape, \u202e, as the CLI writes it. Drawn raw, "svc@1
// to staging \u202enoitcudorp" reads "svc@1 to staging production" (issue
// 24, 7.5). keep lists characters kept as they are (the newlines of
// indented JSON).
func show(s string, keep ...rune) string {
	if isShown(s, keep) {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD"):
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case strconv.IsPrint(r) || slices.Contains(keep, r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
	}
	return b.String()
}

// isShown reports whether s needs no escape.
func isShown(s string, keep []rune) bool {
	if !utf8.ValidString(s) {
		return false
	}
	return strings.IndexFunc(s, func(r rune) bool { return !strconv.IsPrint(r) && !slices.Contains(keep, r) }) < 0
}

// showJSON is show for indented JSON, whose newlines are its layout: a
// string inside it cannot hold a raw newline.
func showJSON(s string) string { return show(s, '\n') }

// clipped is a text cut to a bound: its first characters, how many more
// there are, and where to see it whole.
type clipped struct {
	Text  string
	More  int
	Whole string
}

// clip cuts s to n characters (n 0: none), for a page that must stay
// small; whole is where the page that shows it whole is.
func clip(n int, s, whole string) clipped {
	if n <= 0 || utf8.RuneCountInString(s) <= n {
		return clipped{Text: s, Whole: whole}
	}
	r := []rune(s)
	return clipped{Text: string(r[:n]), More: len(r) - n, Whole: whole}
}
