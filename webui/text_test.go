package webui_test

import (
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// hiddenValue is a hidden field's value: what a form sends back as it was
// typed (the note), never shown.
var hiddenValue = regexp.MustCompile(`<input type="hidden" name="[a-z]+" value="[^"]*">`)

// invisible returns the first character of page that a person cannot see
// or that reorders what they see (a control, a bidi override, a
// zero-width character), hidden fields aside, with the text around it;
// -1 if none.
func invisible(page string) (rune, string) {
	page = hiddenValue.ReplaceAllString(page, "")
	for i, r := range page {
		if r == utf8.RuneError || (!strconv.IsPrint(r) && !strings.ContainsRune("\n\t ", r)) {
			return r, page[max(0, i-60):min(len(page), i+20)]
		}
	}
	return -1, ""
}

// TestInvisibleCharactersAreShown: a summary, a command's field and
// member name, a key and an approver's note that hold a bidi override
// (U+202E, which makes "svc@1 to staging \u202enoitcudorp" read "svc@1 to
// staging production") or a zero-width space are drawn with the
// character written out, as the CLI writes it (\u202e), on every page
// that shows them.
func TestInvisibleCharactersAreShown(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	a := fx.deploy("bot", "dep-bidi-1", `{"artifact":"svc@1 to staging \u202enoitcudorp","environment":"production","tag\u200b":"x"}`)
	alice := fx.signIn(t, "alice")
	confirm := alice.post("/ui/approvals/"+a.ID+"/confirm", alice.decision("approve", a.Fingerprint))
	form := alice.decision("approve", a.Fingerprint)
	form.Set("note", "ok \u202ekcehc")
	if r := alice.post("/ui/approvals/"+a.ID+"/decide", form); r.status != http.StatusSeeOther {
		t.Fatalf("decide: %d %s", r.status, r.body)
	}
	odd := fx.reserve("key-\u202e1", "/v1/tickets", time.Hour)
	pages := map[string]reply{"confirm": confirm}
	for _, path := range []string{"/ui/approvals/" + a.ID, "/ui/operations/" + a.OpID, "/ui/operations",
		"/ui/operations/" + odd.Op.ID} {
		pages[path] = alice.get(path)
	}
	fx.deploy("bot", "dep-bidi-2", `{"artifact":"svc@2 to staging \u202enoitcudorp","environment":"production"}`)
	pages["/ui/inbox"] = alice.get("/ui/inbox")
	for name, r := range pages {
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d", name, r.status)
		}
		if c, around := invisible(r.body); c >= 0 {
			t.Errorf("%s holds %U raw: %q", name, c, around)
		}
	}
	for name, want := range map[string][]string{
		"confirm":                     {`svc@1 to staging \u202enoitcudorp`},
		"/ui/approvals/" + a.ID:       {`svc@1 to staging \u202enoitcudorp`, `/tag\u200b`, `ok \u202ekcehc`},
		"/ui/operations/" + odd.Op.ID: {`key-\u202e1`},
		"/ui/operations":              {`key-\u202e1`},
		"/ui/inbox":                   {`svc@2 to staging \u202enoitcudorp`},
		"/ui/operations/" + a.OpID:    {`ok \u202ekcehc`},
	} {
		contains(t, name, pages[name].body, want...)
	}
}
