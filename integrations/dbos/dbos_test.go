package idemdbos_test

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/internal/testenv"
	"github.com/idemgate/idemgate/ledger"
)

// bin is idemgate, built once from this repository for all the tests.
var bin string

func TestMain(m *testing.M) {
	if os.Getenv("IDEMDBOS_CHILD") != "" {
		os.Exit(runChild())
	}
	os.Exit(testenv.MainWithIdemgate(m, &bin))
}

const (
	workerToken = "worker-token"
	aliceToken  = "alice-token"
)

// The lease is short so that an owner killed mid-effect leaves its
// operation unknown soon (the sweep runs every 100 ms).
const config = `listen: 127.0.0.1:0
store: %s
sweep_interval: 100ms
principals:
  - {name: worker, tenant: acme, roles: [agent], token_sha256: %s}
  - {name: alice, tenant: acme, roles: [admin], token_sha256: %s}
actions:
  - {name: support.reply.send, lease: 2s, roles: [agent]}
`

// proc is one life of the child, its stdout read line by line.
type proc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan error
	mu    sync.Mutex
	err   strings.Builder
}

func startChild(t *testing.T, e childEnv) *proc {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = e.environ()
	p := &proc{cmd: cmd, lines: make(chan string, 16), done: make(chan error, 1)}
	cmd.Stderr = &lockedWriter{p: p}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		p.done <- cmd.Wait()
	}()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return p
}

type lockedWriter struct{ p *proc }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.err.Write(b)
}

func (p *proc) stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err.String()
}

// line waits (60 s at most) for the child's next line starting with prefix.
func (p *proc) line(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case l := <-p.lines:
			if rest, ok := strings.CutPrefix(l, prefix+" "); ok {
				return rest
			}
		case err := <-p.done:
			t.Fatalf("the child exited (%v) before saying %q:\n%s", err, prefix, p.stderr())
		case <-timeout:
			t.Fatalf("the child never said %q:\n%s", prefix, p.stderr())
		}
	}
}

// kill is SIGKILL: no shutdown, nothing written after it.
func (p *proc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

// rig is a gateway on a store of the test's own, the upstream, and DBOS's
// system database in a PostgreSQL schema of the test's own.
type rig struct {
	up    *testenv.Upstream
	alice *client.Client
	child childEnv
}

func newRig(t *testing.T, store, mode string) *rig {
	t.Helper()
	gw := testenv.ServeGateway(t, bin, fmt.Sprintf(config, testenv.StoreDSN(t, store),
		testenv.TokenSHA256(workerToken), testenv.TokenSHA256(aliceToken)))
	_, schema := testenv.PostgresSchema(t)
	base, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	alice, err := client.New(gw.URL, aliceToken)
	if err != nil {
		t.Fatal(err)
	}
	up := testenv.NewUpstream(t)
	return &rig{up: up, alice: alice, child: childEnv{Mode: mode, DBURL: base.String(), Schema: schema,
		Gateway: gw.URL, Token: workerToken, Upstream: up.URL, Workflow: "reply-584-" + store}}
}

// TestKilledAfterRecording: the step's effect is performed and recorded at
// the gateway, and the process is SIGKILLed before DBOS checkpoints the
// step. Restarted, DBOS recovers the workflow and runs the step again,
// which gets the recorded result: one effect.
func TestKilledAfterRecording(t *testing.T) {
	for _, store := range testenv.Stores {
		t.Run(store, func(t *testing.T) {
			r := newRig(t, store, "record")
			first := r.child
			first.Life, first.Hold = "first", true
			life1 := startChild(t, first)
			if got := life1.line(t, "recorded"); got != "reply-584#1" || r.up.Count("reply-584") != 1 {
				t.Fatalf("first life: %q, %d effects", got, r.up.Count("reply-584"))
			}
			life1.kill(t)
			second := r.child
			second.Life = "recover"
			life2 := startChild(t, second)
			if got := life2.line(t, "result"); got != `{"effect":"reply-584#1"}` {
				t.Fatalf("after recovery: %s", got)
			}
			if n := r.up.Count("reply-584"); n != 1 {
				t.Fatalf("%d effects", n)
			}
			t.Logf("EFFECTS dbos %s effects: %d", t.Name(), r.up.Count("reply-584"))
		})
	}
}

// TestKilledMidEffect: the upstream performed the effect and the process
// is SIGKILLed before its answer came back: nobody knows, and the lapsed
// lease makes the operation unknown. Restarted, the recovered workflow
// does not send it again: it waits, until an operator resolves it through
// the control API, then completes with the resolved result. One effect.
func TestKilledMidEffect(t *testing.T) {
	for _, store := range testenv.Stores {
		t.Run(store, func(t *testing.T) {
			r := newRig(t, store, "run")
			release := make(chan struct{})
			r.up.SetHold(func(string) { <-release })
			first := r.child
			first.Life = "first"
			life1 := startChild(t, first)
			if name := r.up.Seen(t); name != "reply-584" {
				t.Fatalf("effect %q", name)
			}
			life1.kill(t)
			close(release)
			second := r.child
			second.Life = "recover"
			life2 := startChild(t, second)
			op := r.awaitUnknown(t)
			if _, err := r.alice.Resolve(context.Background(), op, contract.ResolveRequest{State: "succeeded",
				Note: "the reply is in the mail log", Result: []byte(`{"effect":"found-in-the-mail-log"}`)}); err != nil {
				t.Fatal(err)
			}
			if got := life2.line(t, "result"); got != `{"effect":"found-in-the-mail-log"}` {
				t.Fatalf("after the resolution: %s", got)
			}
			if n := r.up.Count("reply-584"); n != 1 {
				t.Fatalf("%d effects", n)
			}
			t.Logf("EFFECTS dbos %s effects: %d", t.Name(), r.up.Count("reply-584"))
		})
	}
}

// awaitUnknown waits until the gateway holds one unknown operation, and
// returns its id.
func (r *rig) awaitUnknown(t *testing.T) string {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		page, err := r.alice.Operations(context.Background(), client.ListQuery{State: string(ledger.Unknown)})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Operations) == 1 {
			return page.Operations[0].ID
		}
	}
	t.Fatal("no operation became unknown")
	return ""
}
