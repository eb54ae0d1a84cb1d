package layout

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// module is the prefix the rules strip: they name packages relative to the
// module root ("store/sqlite"), as docs/design.md does.
const module = "github.com/idemgate/idemgate"

// graph maps each module package to the module packages its non-test files
// import directly, all relative to the module root.
type graph map[string][]string

// rule is one layout constraint: the packages it binds and the imports
// they may not have.
type rule struct {
	id, why string
	binds   func(pkg string) bool
	forbid  func(pkg, imp string) bool
	// linked judges every module package pkg links (its transitive
	// dependencies), not only what it imports itself.
	linked bool
}

// violation is a forbidden import; via is the chain that brings it in.
type violation struct {
	rule, why, pkg, imp string
	via                 []string
	linked              bool // a package outside the module, linked by some path
}

func (v violation) String() string {
	if v.linked {
		return fmt.Sprintf("rule %s (%s): %s links %s", v.rule, v.why, v.pkg, v.imp)
	}
	if len(v.via) > 2 {
		return fmt.Sprintf("rule %s (%s): %s links %s (through %s)", v.rule, v.why, v.pkg, v.imp,
			strings.Join(v.via, " -> "))
	}
	return fmt.Sprintf("rule %s (%s): %s imports %s", v.rule, v.why, v.pkg, v.imp)
}

var (
	stores = []string{"store/sqlite", "store/postgres"}
	// testSupport is what only tests may import.
	testSupport = []string{"internal/testenv", "internal/dbtest"}
	// builtOnData is what is built on the data plane: the other planes,
	// the capabilities, the wiring. Neither a store nor httpidem imports it.
	builtOnData = []string{"gateway", "control", "webui", "maintain", "outbox", "reconcile", "metrics", "tracing", "inbox", "mcpproxy", "cmd"}
)

// wiresStores lists the packages outside cmd/ that may open a store
// themselves, each with why. An entry whose package does not exist (it
// moved during issue 20) binds nothing.
var wiresStores = map[string]string{
	"internal/opsapi": "the reference upstream (tickets, payments, deployments) with its own embedded ledger",
	"internal/dbtest": "test support: opens each store for the tests",
}

// rules are docs/design.md's Layout as checks.
var rules = []rule{
	{id: "a", why: "domain at the centre: stores import ledger, never the reverse",
		binds:  domain,
		forbid: func(_, imp string) bool { return !ledgerMay(imp) }},
	{id: "b", why: "a store is an adapter: neither the other store nor anything built on it",
		binds: func(p string) bool { return within(p, stores...) },
		forbid: func(p, imp string) bool {
			return within(imp, "httpidem") || within(imp, builtOnData...) || otherStore(p, imp)
		}},
	{id: "c", why: "only cmd/ wires the stores in",
		binds:  func(p string) bool { return !within(p, "cmd") && wiresStores[p] == "" },
		forbid: otherStore},
	{id: "d", why: "the wire contract imports only ledger",
		binds:  func(p string) bool { return p == "contract" },
		forbid: func(_, imp string) bool { return imp != "ledger" }},
	{id: "e", why: "the typed control client links no server code", linked: true,
		binds:  func(p string) bool { return within(p, "control/client") },
		forbid: func(_, imp string) bool { return !clientMay(imp) }},
	{id: "f", why: "the data plane is the keyed write path, nothing else",
		binds:  func(p string) bool { return within(p, "httpidem") },
		forbid: func(_, imp string) bool { return within(imp, builtOnData...) || within(imp, "store") }},
	{id: "g", why: "outbox and webui need the contract, not the data plane",
		binds:  func(p string) bool { return within(p, "outbox", "webui") },
		forbid: func(_, imp string) bool { return within(imp, "httpidem") }},
	{id: "h", why: "test support is for tests",
		binds:  func(p string) bool { return !within(p, testSupport...) },
		forbid: func(_, imp string) bool { return within(imp, testSupport...) }},
	{id: "i", why: "the control plane and the web page call the data plane through the store, never its code",
		binds: func(p string) bool { return within(p, "control", "webui") },
		forbid: func(p, imp string) bool {
			return within(imp, "httpidem", "gateway") || within(p, "control") && within(imp, "webui")
		}},
	{id: "j", why: "what a library user links for the outbox, the maintenance plane or a client carries no CEL", linked: true,
		binds:  func(p string) bool { return within(p, "outbox", "maintain", "contract", "control/client", "agent") },
		forbid: func(_, imp string) bool { return within(imp, celUsers...) }},
	{id: "k", why: "a webhook's verification is a leaf: the gateway calls it before its data plane, the drill to sign",
		binds:  func(p string) bool { return within(p, "inbox/webhook") },
		forbid: func(_, imp string) bool { return true }},
	{id: "l", why: "the inbox reaches the data plane through its Deliverer, the metrics through its Observer, and each broker stays in its own package",
		binds: func(p string) bool { return within(p, "inbox") },
		forbid: func(p, imp string) bool {
			return within(imp, "httpidem", "gateway", "control", "webui", "store", "cmd", "metrics") ||
				within(imp, "inbox/natsinbox", "inbox/amqpinbox") && !within(p, imp)
		}},
	{id: "m", why: "the MCP proxy is the executor's adapter, never the HTTP one's; only cmd/ wires it to the gateway",
		binds: func(p string) bool { return within(p, "mcpproxy") },
		forbid: func(_, imp string) bool {
			return within(imp, "httpidem", "gateway", "control", "webui", "maintain", "outbox", "store")
		}},
	{id: "p", why: "the configuration reads and checks the file; it builds no plane (only cmd/ wires them from it)",
		binds: func(p string) bool { return within(p, "config") },
		forbid: func(_, imp string) bool {
			return within(imp, "httpidem", "gateway", "mcpproxy", "control", "webui", "maintain", "outbox", "store",
				"cmd", "tracing", "metrics")
		}},
	{id: "o", why: "the keyed executor knows no transport and no surface: they are its adapters",
		binds: func(p string) bool { return within(p, "keyed") },
		forbid: func(_, imp string) bool {
			return within(imp, "httpidem", "gateway", "mcpproxy", "inbox", "control", "webui", "maintain", "outbox",
				"store", "cmd", "tracing", "metrics")
		}},
}

// links maps each module package to every package outside the module
// (the standard library's, a dependency's) that it links, by import path.
type links map[string][]string

// extRule is a constraint on what a module package links from outside the
// module, through any path: go list's Deps, which the module graph does
// not hold.
type extRule struct {
	id, why string
	binds   func(pkg string) bool
	forbid  func(imp string) bool
}

// domain is the ledger, without its conformance suite (a test helper).
func domain(p string) bool { return within(p, "ledger") && !within(p, "ledger/storetest") }

// extRules are the rules on what the module links from outside.
var extRules = []extRule{
	{id: "n", why: "the domain speaks no HTTP: an outcome is a neutral response each surface writes in its own terms",
		binds:  domain,
		forbid: func(imp string) bool { return imp == "net/http" }},
}

// checkLinks returns every linked package an extRule forbids.
func checkLinks(l links, rules []extRule) []violation {
	var vs []violation
	for _, pkg := range slices.Sorted(maps.Keys(l)) {
		for _, r := range rules {
			if !r.binds(pkg) {
				continue
			}
			for _, imp := range l[pkg] {
				if r.forbid(imp) {
					vs = append(vs, violation{rule: r.id, why: r.why, pkg: pkg, imp: imp, linked: true})
				}
			}
		}
	}
	return vs
}

// celUsers are the packages that link cel-go (and so protobuf and antlr).
var celUsers = []string{"approval", "reconcile", "drill"}

// within reports whether pkg is one of roots or below one.
func within(pkg string, roots ...string) bool {
	for _, r := range roots {
		if pkg == r || strings.HasPrefix(pkg, r+"/") {
			return true
		}
	}
	return false
}

// internalLeaf is an internal helper a domain package may use: not the
// stores' shared steps (they import ledger) and not test support.
func internalLeaf(imp string) bool {
	return within(imp, "internal") && !within(imp, "internal/steps") && !within(imp, testSupport...)
}

func ledgerMay(imp string) bool {
	return imp == "audit" || imp == "fingerprint" || internalLeaf(imp) ||
		within(imp, "ledger") && !within(imp, "ledger/storetest")
}

func clientMay(imp string) bool {
	return ledgerMay(imp) || imp == "contract" || within(imp, "control/client")
}

// otherStore reports whether imp is a store pkg is not part of.
func otherStore(pkg, imp string) bool {
	for _, s := range stores {
		if within(imp, s) && !within(pkg, s) {
			return true
		}
	}
	return false
}

// check returns every import of g that a rule forbids.
func check(g graph, rules []rule) []violation {
	var vs []violation
	for _, pkg := range slices.Sorted(maps.Keys(g)) {
		for _, r := range rules {
			if r.binds(pkg) {
				vs = append(vs, r.judge(g, pkg)...)
			}
		}
	}
	return vs
}

func (r rule) judge(g graph, pkg string) []violation {
	from := reach(g, pkg, r.linked)
	var vs []violation
	for _, imp := range slices.Sorted(maps.Keys(from)) {
		if r.forbid(pkg, imp) {
			vs = append(vs, violation{rule: r.id, why: r.why, pkg: pkg, imp: imp, via: chain(from, pkg, imp)})
		}
	}
	return vs
}

// reach maps each package pkg imports (deep: or links) to the package
// importing it on a shortest path from pkg.
func reach(g graph, pkg string, deep bool) map[string]string {
	from := map[string]string{}
	queue := []string{pkg}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, imp := range g[p] {
			if _, seen := from[imp]; !seen && imp != pkg {
				from[imp] = p
				if deep {
					queue = append(queue, imp)
				}
			}
		}
	}
	return from
}

// chain is the import path from pkg to imp that reach recorded.
func chain(from map[string]string, pkg, imp string) []string {
	c := []string{imp}
	for p := imp; p != pkg; {
		p = from[p]
		c = append(c, p)
	}
	slices.Reverse(c)
	return c
}

// load reads the module's graph of non-test imports, and what each
// package links from outside the module, with go list, run from the
// module root so that ./... is the whole module.
func load(t *testing.T) (graph, links) {
	t.Helper()
	cmd := exec.Command("go", "list", "-f",
		`{{.ImportPath}}{{range .Imports}} {{.}}{{end}}{{"\t"}}{{range .Deps}} {{.}}{{end}}`, "./...")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr(err))
	}
	var imports, deps strings.Builder
	for line := range strings.Lines(string(out)) {
		imp, dep, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "\t")
		pkg, _, _ := strings.Cut(imp, " ")
		imports.WriteString(imp + "\n")
		deps.WriteString(pkg + dep + "\n")
	}
	return parse(imports.String()), parseLinks(deps.String())
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || gomod == "" || gomod == os.DevNull {
		t.Fatalf("no go.mod (go env GOMOD: %q, %v)", gomod, err)
	}
	return filepath.Dir(gomod)
}

func stderr(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}

// parse reads go list's lines (a package, then what it imports), keeping
// the module's packages only.
func parse(out string) graph {
	return parseLines(out, func(f string) (string, bool) { return strings.CutPrefix(f, module+"/") })
}

// parseLinks reads lines of a package and what it links, keeping, for
// the module's packages, what they link from outside it.
func parseLinks(out string) links {
	return parseLines(out, func(f string) (string, bool) {
		return f, f != module && !strings.HasPrefix(f, module+"/")
	})
}

// parseLines reads go list's lines (a package, then the packages it
// names), keeping the module's packages, and of what each names what keep
// keeps, as keep renames it.
func parseLines(out string, keep func(string) (string, bool)) map[string][]string {
	g := map[string][]string{}
	for line := range strings.Lines(out) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg, ok := strings.CutPrefix(fields[0], module+"/")
		if !ok {
			continue
		}
		g[pkg] = []string{}
		for _, f := range fields[1:] {
			if imp, ok := keep(f); ok {
				g[pkg] = append(g[pkg], imp)
			}
		}
	}
	return g
}

func TestLayout(t *testing.T) {
	g, l := load(t)
	// A graph read wrong (another module path, an empty list) would pass
	// every rule, so the packages the rules are about must be in it.
	for _, pkg := range []string{"ledger", "contract", "httpidem", "store/sqlite", "store/postgres", "cmd/idemgate"} {
		if _, ok := g[pkg]; !ok {
			t.Fatalf("go list found no package %s in %d packages: the graph was read wrong", pkg, len(g))
		}
	}
	if !slices.Contains(l["ledger"], "context") {
		t.Fatalf("go list says ledger links %v, without context: the links were read wrong", l["ledger"])
	}
	for _, v := range append(check(g, rules), checkLinks(l, extRules)...) {
		t.Error(v)
	}
}

// clean is a small graph in the shape docs/design.md describes.
func clean() graph {
	return graph{
		"fingerprint":      {},
		"audit":            {"fingerprint"},
		"ledger":           {"audit"},
		"contract":         {"ledger"},
		"internal/jsonptr": {},
		"internal/steps":   {"ledger"},
		"internal/testenv": {},
		"internal/dbtest":  {"internal/testenv", "store/sqlite"},
		"store/sqlite":     {"ledger", "internal/steps"},
		"store/postgres":   {"ledger", "internal/steps"},
		"keyed":            {"contract", "ledger", "approval", "fingerprint"},
		"httpidem":         {"keyed", "contract", "ledger"},
		"metrics":          {"keyed"},
		"gateway":          {"httpidem", "metrics"},
		"control/client":   {"contract", "internal/jsonptr"},
		"internal/opsapi":  {"httpidem", "store/sqlite"},
		"approval":         {},
		"reconcile":        {"ledger"},
		"control":          {"contract", "ledger", "approval"},
		"webui":            {"control", "contract", "ledger", "approval"},
		"outbox":           {"contract", "ledger"},
		"inbox":            {"keyed", "contract", "ledger"},
		"inbox/natsinbox":  {"inbox", "ledger"},
		"inbox/amqpinbox":  {"inbox"},
		"maintain":         {"audit"},
		"cmd/idemgate":     {"gateway", "store/sqlite", "store/postgres"},
		"inbox/webhook":    {},
		"mcpproxy":         {"keyed", "approval", "contract", "fingerprint", "ledger"},
		"config":           {"keyed", "approval", "contract", "inbox", "limits", "reconcile"},
	}
}

// The rules catch each kind of violation, so TestLayout cannot pass
// because a rule matches nothing.
func TestRulesCatchViolations(t *testing.T) {
	if vs := check(clean(), rules); len(vs) != 0 {
		t.Fatalf("the clean graph violates %v", vs)
	}
	for _, c := range []struct{ from, to, rule, pkg, imp string }{
		{"ledger", "store/sqlite", "a", "ledger", "store/sqlite"},
		{"ledger", "httpidem", "a", "ledger", "httpidem"},
		{"store/sqlite", "store/postgres", "b", "store/sqlite", "store/postgres"},
		{"store/postgres", "metrics", "b", "store/postgres", "metrics"},
		{"gateway", "store/postgres", "c", "gateway", "store/postgres"},
		{"contract", "fingerprint", "d", "contract", "fingerprint"},
		{"control/client", "internal/steps", "e", "control/client", "internal/steps"},
		{"internal/jsonptr", "gateway", "e", "control/client", "gateway"},
		{"httpidem", "metrics", "f", "httpidem", "metrics"},
		{"outbox", "httpidem", "g", "outbox", "httpidem"},
		{"gateway", "internal/testenv", "h", "gateway", "internal/testenv"},
		{"control", "httpidem", "i", "control", "httpidem"},
		{"webui", "gateway", "i", "webui", "gateway"},
		{"maintain", "reconcile", "j", "maintain", "reconcile"},
		{"contract", "approval", "j", "contract", "approval"},
		{"inbox/webhook", "contract", "k", "inbox/webhook", "contract"},
		{"inbox", "gateway", "l", "inbox", "gateway"},
		{"inbox/amqpinbox", "inbox/natsinbox", "l", "inbox/amqpinbox", "inbox/natsinbox"},
		{"inbox/natsinbox", "metrics", "l", "inbox/natsinbox", "metrics"},
		{"httpidem", "inbox", "f", "httpidem", "inbox"},
		{"mcpproxy", "gateway", "m", "mcpproxy", "gateway"},
		{"mcpproxy", "store/sqlite", "m", "mcpproxy", "store/sqlite"},
		{"httpidem", "mcpproxy", "f", "httpidem", "mcpproxy"},
		{"mcpproxy", "httpidem", "m", "mcpproxy", "httpidem"},
		{"keyed", "httpidem", "o", "keyed", "httpidem"},
		{"config", "gateway", "p", "config", "gateway"},
		{"keyed", "inbox", "o", "keyed", "inbox"},
	} {
		g := clean()
		g[c.from] = append(g[c.from], c.to)
		vs := check(g, rules)
		if !slices.ContainsFunc(vs, func(v violation) bool { return v.rule == c.rule && v.pkg == c.pkg && v.imp == c.imp }) {
			t.Errorf("%s -> %s: want rule %s on %s importing %s, got %v", c.from, c.to, c.rule, c.pkg, c.imp, vs)
		}
	}
}

// The rules on what the module links from outside catch a domain that
// links net/http, however it comes in (here through httptest), and
// nothing else.
func TestLinkRulesCatchViolations(t *testing.T) {
	clean := links{"ledger": {"context", "net/textproto"}, "ledger/storetest": {"net/http"}, "httpidem": {"net/http"}}
	if vs := checkLinks(clean, extRules); len(vs) != 0 {
		t.Fatalf("the clean links violate %v", vs)
	}
	l := links{"ledger": {"context", "net/http/httptest", "net/http"}}
	vs := checkLinks(l, extRules)
	want := "rule n (" + extRules[0].why + "): ledger links net/http"
	if len(vs) != 1 || vs[0].String() != want {
		t.Errorf("got %v, want %q", vs, want)
	}
}

// A violation names the rule, the package and the import, and the chain
// when the import is a link.
func TestViolationNamesThePath(t *testing.T) {
	g := clean()
	g["internal/jsonptr"] = append(g["internal/jsonptr"], "gateway")
	want := "rule e (the typed control client links no server code): control/client links gateway" +
		" (through control/client -> internal/jsonptr -> gateway)"
	for _, v := range check(g, rules) {
		if v.String() == want {
			return
		}
	}
	t.Fatalf("no violation reads %q in %v", want, check(g, rules))
}
