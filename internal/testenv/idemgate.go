package testenv

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// What the tests of the modules beside the main one (integrations/…)
// need to run idemgate for real: the command built from this repository,
// served as a process on a store of the test's own, and an upstream that
// counts the effects the code under test performs.

// BinaryEnv names an idemgate binary, by its absolute path, that the
// tests run instead of building one of their own: make test builds
// bin/idemgate-test once (without -race) and sets it for every suite, the
// Go packages', the integration modules' and the Python and TypeScript
// clients'. Unset (go test ./e2e in a fresh clone), each builds its own.
const BinaryEnv = "IDEMGATE_TEST_BINARY"

// GivenIdemgate is the binary BinaryEnv names, if it names an executable
// file. Set to anything else, it says so on stderr and returns false: the
// caller builds idemgate as it would without it.
func GivenIdemgate() (string, bool) {
	given := os.Getenv(BinaryEnv)
	if given == "" {
		return "", false
	}
	bin, err := filepath.Abs(given)
	if err == nil {
		var fi os.FileInfo
		if fi, err = os.Stat(bin); err == nil && (!fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0) {
			err = fmt.Errorf("not an executable file")
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s=%s: %v; building idemgate instead\n", BinaryEnv, given, err)
		return "", false
	}
	return bin, true
}

// BuildIdemgate builds the idemgate command into dir and returns its path.
// It builds in the repository's root module (go list -m finds it, so a
// module that replaces it with ../.. gets the same code, with the root's
// own dependency versions, not its own).
func BuildIdemgate(dir string) (string, error) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/idemgate/idemgate").Output()
	if err != nil {
		return "", fmt.Errorf("go list -m github.com/idemgate/idemgate: %w (%s)", err, stderr(err))
	}
	bin := filepath.Join(dir, "idemgate")
	build := exec.Command("go", "build", "-o", bin, "./cmd/idemgate")
	build.Dir = strings.TrimSpace(string(out))
	if msg, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/idemgate: %w\n%s", err, msg)
	}
	return bin, nil
}

func stderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// Stores are the store kinds a gateway runs on in the tests.
var Stores = []string{"sqlite", "postgres"}

// StoreDSN is a store of the test's own: a SQLite file in its temporary
// directory, or a PostgreSQL schema of its own (PostgresSchema: skipped or
// failed as RequirePostgres says when the server is away).
func StoreDSN(tb testing.TB, kind string) string {
	tb.Helper()
	if kind == "postgres" {
		dsn, _ := PostgresSchema(tb)
		return dsn
	}
	return "sqlite:" + filepath.Join(tb.TempDir(), "gateway.db")
}

// TokenSHA256 is how a configuration names a principal's bearer token.
func TokenSHA256(token string) string {
	s := sha256.Sum256([]byte(token))
	return hex.EncodeToString(s[:])
}

// ServeGateway runs bin serve with config (YAML, which should listen on
// 127.0.0.1:0) as a real process, and returns once it answers /readyz.
func ServeGateway(tb testing.TB, bin, config string) *Process {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		tb.Fatal(err)
	}
	p := StartProcess(tb, exec.Command(bin, "serve", "--config", path))
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		resp, err := http.Get(p.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("the gateway never got ready (%v):\n%s", err, strings.Join(p.Logs(), "\n"))
		}
	}
}

// Upstream is where the code under test performs its effects, on a real
// socket: each POST /effects/{name} is one effect, counted by name, and
// answered {"effect":"NAME#N"}.
type Upstream struct {
	URL string

	mu     sync.Mutex
	hold   func(name string)
	counts map[string]int
	seen   chan string
}

// NewUpstream starts an upstream, closed when the test ends.
func NewUpstream(tb testing.TB) *Upstream {
	u := &Upstream{counts: map[string]int{}, seen: make(chan string, 1024)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /effects/{name}", func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		u.mu.Lock()
		u.counts[name]++
		n := u.counts[name]
		hold := u.hold
		u.mu.Unlock()
		u.seen <- name
		if hold != nil {
			hold(name)
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"effect":"%s#%d"}`, name, n)
	})
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	u.URL = srv.URL
	return u
}

// SetHold makes hold (when not nil) be called with each effect's name
// once it is counted and before it is answered, on the request's
// goroutine: a test blocks there to stop its caller between the effect and
// its answer.
func (u *Upstream) SetHold(hold func(name string)) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.hold = hold
}

// Count is how many times the effect name was performed.
func (u *Upstream) Count(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.counts[name]
}

// Seen waits (20 s at most) for the next effect and returns its name.
func (u *Upstream) Seen(tb testing.TB) string {
	tb.Helper()
	select {
	case name := <-u.seen:
		return name
	case <-time.After(20 * time.Second):
		tb.Fatal("no effect reached the upstream")
		return ""
	}
}

// MainWithIdemgate is a TestMain's body for tests that run idemgate, the
// one way a Go test gets its binary: it sets *bin to the one BinaryEnv
// names, or builds it into a temporary directory (removed after), then
// runs the tests; it returns the exit code.
func MainWithIdemgate(m *testing.M, bin *string) int {
	if given, ok := GivenIdemgate(); ok {
		*bin = given
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "idemgate-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if *bin, err = BuildIdemgate(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// PostEffect performs one effect named name at the upstream at url (an
// Upstream's URL, maybe in another process) and returns the upstream's
// name for it ("NAME#N").
func PostEffect(ctx context.Context, url, name string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/effects/"+name, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var out struct{ Effect string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	return out.Effect, nil
}
