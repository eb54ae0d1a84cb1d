package webui

import "testing"

// TestShow: what show writes out, and what it keeps.
func TestShow(t *testing.T) {
	for in, want := range map[string]string{
		"svc@1 to staging \u202enoitcudorp": `svc@1 to staging \u202enoitcudorp`,
		"a\u200bb\u2066c":                   `a\u200bb\u2066c`,
		"bell\a, esc\x1b[2J, line\nfeed":    `bell\a, esc\x1b[2J, line\nfeed`,
		"bad \xff byte, kept \uFFFD":        `bad \xff byte, kept ` + "\uFFFD",
		"déjà vu, 東京, عربي":                 "déjà vu, 東京, عربي",
	} {
		if got := show(in); got != want {
			t.Errorf("show(%q) = %q, want %q", in, got, want)
		}
	}
	if got := showJSON("{\n  \"a\": \"\u202e\"\n}"); got != "{\n  \"a\": \"\\u202e\"\n}" {
		t.Errorf("showJSON keeps the layout's newlines only: %q", got)
	}
}
