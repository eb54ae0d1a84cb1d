package webui_test

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
)

var (
	cardID   = regexp.MustCompile(`<li class="card[^"]*" id="approval-(apr_[0-9A-Z]+)">`)
	nextPage = regexp.MustCompile(`href="(/ui/inbox\?after=[^"]+)"[^>]*id="next-page"`)
)

// TestAFloodedInboxStaysSmall: an agent asks for 25 deployments whose
// artifact (so the summary and a field) is 60 KB each, under the 64 KiB
// an approval may hold. The inbox shows
// them a page at a time, each page far smaller than what it lists, with
// long texts cut and a link to see each whole; the pages together list
// every approval once; the approval's own page holds the field whole.
func TestAFloodedInboxStaysSmall(t *testing.T) {
	t.Parallel()
	fx := newFixture(t)
	huge := strings.Repeat("0123456789abcdef", 60<<10/16)
	want := map[string]bool{}
	var first string
	for i := range 25 {
		a := fx.deploy("bot", fmt.Sprint("flood-", i), fmt.Sprintf(`{"artifact":"%d-%s","environment":"production"}`, i, huge))
		want[a.ID] = true
		if first == "" {
			first = a.ID
		}
	}
	alice := fx.signIn(t, "alice")
	seen := map[string]bool{}
	pages := 0
	for path := "/ui/inbox"; path != ""; pages++ {
		r := alice.get(path)
		if r.status != http.StatusOK || len(r.body) > 256<<10 {
			t.Fatalf("%s: %d, %d KB (want at most 256 KB)", path, r.status, len(r.body)>>10)
		}
		ids := cardID.FindAllStringSubmatch(r.body, -1)
		if len(ids) == 0 || len(ids) > 20 {
			t.Fatalf("%s: %d approvals on a page", path, len(ids))
		}
		for _, m := range ids {
			if seen[m[1]] {
				t.Fatalf("%s lists %s again", path, m[1])
			}
			seen[m[1]] = true
		}
		if !strings.Contains(r.body, `href="/ui/approvals/`+ids[0][1]+`#command">`) || !strings.Contains(r.body, "more characters") {
			t.Errorf("%s: a cut text has no link to see it whole", path)
		}
		path = ""
		if m := nextPage.FindStringSubmatch(r.body); m != nil {
			path = strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	if len(seen) != len(want) || pages < 2 {
		t.Fatalf("the pages listed %d approvals of %d, in %d pages", len(seen), len(want), pages)
	}
	whole := alice.get("/ui/approvals/" + first)
	if !strings.Contains(whole.body, "0-"+huge) {
		t.Fatal("the approval's page does not hold the field whole")
	}
}
