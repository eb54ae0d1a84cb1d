package gateway

import (
	"encoding/json"
	"net/url"
	"os/exec"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/internal/testenv"
)

// spellings are Location values a browser reads otherwise than RFC 3986
// (issue 34, item 20), and their neighbours that must stay.
var spellings = []string{
	"http:/127.0.0.1:3000/x", `http:\\127.0.0.1:3000\x`, `/\127.0.0.1:3000/x`, `\\127.0.0.1:3000/x`,
	`http://127.0.0.1:3000\@evil.example/x`, "http://\t127.0.0.1:3000/x", "http:127.0.0.1:3000/x",
	" http://127.0.0.1:3000/x", "\x01http://127.0.0.1:3000/x\x1f", "http://%31%32%37.0.0.1:3000/x",
	"http://１２７.０.０.１:3000/x", "HtTp:///127.0.0.1:3000/x", "http://127.0.0.1:3000//evil.example/x",
	`//127.0.0.1:3000\x?a\b#c\d`, "http://127.0.0.1:3000/x\n", "http://12\n7.0.0.1:3000/x",
	`http://evil.example\@127.0.0.1:3000/x`, "http://evil.example/x", "https://127.0.0.1:3000/x",
	"/x", "x", `\x`, "mailto:a@127.0.0.1", "http://127.0.0.1:3001/x", "http://user:pw@127.0.0.1:3000/x",
	"http://127.0.0.1:3000?q", "http://127.0.0.1:3000#f", "http://LOCALHOST:3000/x", "ftp://127.0.0.1:3000/x",
}

// browserReadings asks a WHATWG URL parser (Node's URL) how each value
// reads in a document of each scheme: the origin, and the path, query and
// fragment, by value.
func browserReadings(t *testing.T, refs []string) map[string][]struct{ Origin, Rest string } {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		if testenv.InCI() {
			t.Fatal("node is needed: its URL is the WHATWG parser these spellings are checked against")
		}
		t.Skip("node is not installed: no WHATWG parser to check the spellings against")
	}
	in, _ := json.Marshal(refs)
	script := `const out = {}; for (const r of JSON.parse(process.argv[1])) { out[r] = ["http://gw.test/v1/a",
		"https://gw.test/v1/a"].map(b => { try { const u = new URL(r, b); return {Origin: u.origin,
		Rest: u.pathname + u.search + u.hash} } catch (e) { return {Origin: "", Rest: ""} } }) }
		console.log(JSON.stringify(out))`
	raw, err := exec.Command(node, "-e", script, string(in)).Output()
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	out := map[string][]struct{ Origin, Rest string }{}
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLocalAsABrowserReadsIt: a Location a browser reads as the upstream's
// origin, in a document of either scheme, is rewritten to the gateway's
// path (the path the browser would ask for, its leading slashes made one);
// one it reads as another origin, or as a path here, stays.
func TestLocalAsABrowserReadsIt(t *testing.T) {
	up, _ := url.Parse("http://127.0.0.1:3000")
	o := originOf(up)
	for ref, readings := range browserReadings(t, spellings) {
		want := ""
		for _, r := range readings {
			// The origin as the browser wrote it, compared as the gateway
			// compares origins (localhost is the loopback address).
			if u, err := url.Parse(r.Origin); err == nil && u.Scheme == "http" && o.same(u.Scheme, u.Hostname(), u.Port()) {
				want = "/" + strings.TrimLeft(r.Rest, "/")
			}
		}
		got, ok := o.local(ref)
		if ok != (want != "") {
			t.Errorf("%q: local = %q, %v; a browser reads it as %+v", ref, got, ok, readings)
			continue
		}
		if unescape(got) != unescape(want) {
			t.Errorf("%q: local = %q; a browser asks for %q", ref, got, want)
		}
	}
}

func unescape(s string) string {
	u, err := url.PathUnescape(s)
	if err != nil {
		return s
	}
	return u
}

// FuzzLocal: whatever the upstream's Location, a rewritten one is a path
// at the gateway that no browser reads as another origin (one slash, no
// tab or newline), and it stays as it is when given again.
func FuzzLocal(f *testing.F) {
	for _, s := range spellings {
		f.Add(s)
	}
	up, _ := url.Parse("http://127.0.0.1:3000")
	o := originOf(up)
	f.Fuzz(func(t *testing.T, ref string) {
		got, ok := o.local(ref)
		if !ok {
			return
		}
		if !strings.HasPrefix(got, "/") || strings.HasPrefix(got, "//") || strings.HasPrefix(got, `/\`) ||
			strings.ContainsAny(got, "\t\r\n") {
			t.Fatalf("%q rewritten as %q, which a browser may read as another origin", ref, got)
		}
		if again, ok := o.local(got); ok {
			t.Fatalf("%q rewritten as %q, rewritten again as %q", ref, got, again)
		}
	})
}
