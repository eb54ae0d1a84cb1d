package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/testenv"
)

// startServing starts serve on config with a pid file, as a real process.
func startServing(t *testing.T, config, pidFile string) *testenv.Process {
	t.Helper()
	cmd := exec.Command(child, "serve", "--config", config, "--pid-file", pidFile)
	cmd.Env = childEnv()
	return testenv.StartProcess(t, cmd)
}

// waitLog waits (10s at most) for the process to log msg n times.
func waitLog(t *testing.T, p *testenv.Process, msg string, n int) string {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var seen []string
		for _, l := range p.Logs() {
			if strings.Contains(l, `"msg":"`+msg+`"`) {
				seen = append(seen, l)
			}
		}
		if len(seen) >= n {
			return seen[n-1]
		}
	}
	t.Fatalf("no %q logged %d times:\n%s", msg, n, strings.Join(p.Logs(), "\n"))
	return ""
}

// TestReloadUnderLoad: a real gateway serves a storm of 800 keyed
// requests (400 keys, each sent twice) from 32 workers while its file
// changes twice, each change applied by idemgate reload (SIGHUP through
// the pid file): once valid, with a new route and principal, once broken.
// No request fails because of a reload, every key has exactly one effect,
// the valid file is served after, and the broken one is refused with its
// file and line.
func TestReloadUnderLoad(t *testing.T) {
	t.Parallel()
	stores := map[string]func(t *testing.T) string{
		"sqlite": func(t *testing.T) string { return "sqlite:" + filepath.Join(t.TempDir(), "gw.db") },
		"postgres": func(t *testing.T) string {
			dsn, _ := testenv.PostgresSchema(t)
			return dsn
		},
	}
	for name, store := range stores {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			up := newSlowUpstream(t, 0)
			go func() { // its channel of starts holds 1000
				for {
					select {
					case <-up.started:
					case <-t.Context().Done():
						return
					}
				}
			}()
			config := writeConfig(t, store(t), up.srv.URL, "limits: {default: {rate: 100000/s, burst: 100000}}\n")
			// A lease of minutes: the storm is about reloads, and a 1s lease
			// whose heartbeats a loaded machine delays lapses (outcome_unknown).
			longLease := strings.Replace(mustReadFile(t, config), "upstream: app, lease: 1s}", "upstream: app, lease: 5m}", 1)
			if err := os.WriteFile(config, []byte(longLease), 0o600); err != nil {
				t.Fatal(err)
			}
			pidFile := filepath.Join(t.TempDir(), "idemgate.pid")
			g := startServing(t, config, pidFile)
			base := mustReadFile(t, config)
			valid := strings.Replace(base, "principals:\n", "principals:\n  - {name: newbie, tenant: acme, "+
				"roles: [agent], token_sha256: "+hashOf("newbie-token")+"}\n", 1)
			valid = strings.Replace(valid, "limits:", "  - {match: POST /v1/new, upstream: app}\nlimits:", 1)
			broken := strings.Replace(valid, "limits:", "  - {match: POST /v1/broken, upstream: nowhere}\nlimits:", 1)
			const keys, workers = 400, 32
			var done, failed atomic.Int64
			jobs := make(chan int)
			var wg sync.WaitGroup
			for range workers {
				wg.Go(func() {
					for i := range jobs {
						status, body := post(t, g.URL, "/v1/writes", fmt.Sprintf("k-%d", i/2), "Prefer", "wait=10")
						if status != 201 && failed.Add(1) <= 3 {
							t.Errorf("key k-%d: %d %s", i/2, status, body)
						}
						done.Add(1)
					}
				})
			}
			reloads := []struct {
				at   int64
				text string
				log  string
			}{{keys / 2, valid, "configuration reloaded"}, {keys * 6 / 5, broken, "configuration not reloaded: the running one is kept"}}
			go func() {
				for _, r := range reloads {
					for done.Load() < r.at {
						time.Sleep(time.Millisecond)
					}
					if err := os.WriteFile(config, []byte(r.text), 0o600); err != nil {
						t.Error(err)
					}
					if res := run(t, "", "reload", "--pid-file", pidFile); res.code != 0 {
						t.Errorf("reload: %d %s", res.code, res.stderr)
					}
				}
			}()
			var refused string
			for i := range 2 * keys {
				if i == 2*keys-200 { // the storm goes on after both reloads
					waitLog(t, g, "configuration reloaded", 1)
					refused = waitLog(t, g, "configuration not reloaded: the running one is kept", 1)
				}
				jobs <- i
			}
			close(jobs)
			wg.Wait()
			where := fmt.Sprintf("%s:%d", config, strings.Count(broken[:strings.Index(broken, "/v1/broken")], "\n")+1)
			if !strings.Contains(refused, where+`: route POST /v1/broken: upstream \"nowhere\" is not defined`) {
				t.Errorf("the refusal does not name %s: %s", where, refused)
			}
			if n := up.effects.Load(); n != keys || failed.Load() != 0 {
				t.Fatalf("%d effects of %d keys; %d requests failed", n, keys, failed.Load())
			}
			status, body := post(t, g.URL, "/v1/new", "n-1", "Authorization", "Bearer newbie-token")
			if status != 201 {
				t.Fatalf("the valid file's route and principal, after the broken one: %d %s", status, body)
			}
		})
	}
}

// TestReloadRefusesAStrangersPid: a stale pid file naming a process that
// is no idemgate is refused; nothing is signalled.
func TestReloadRefusesAStrangersPid(t *testing.T) {
	t.Parallel()
	sleep := exec.Command("sleep", "30")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sleep.Process.Kill(); sleep.Wait() })
	pidFile := filepath.Join(t.TempDir(), "stale.pid")
	os.WriteFile(pidFile, fmt.Appendf(nil, "%d\n", sleep.Process.Pid), 0o600)
	r := run(t, "", "reload", "--pid-file", pidFile)
	if r.code == 0 || !strings.Contains(r.stderr, "is not idemgate") {
		t.Fatalf("%d %s", r.code, r.stderr)
	}
	if err := syscall.Kill(sleep.Process.Pid, 0); err != nil {
		t.Fatalf("the stranger was signalled (SIGHUP ends a sleep): %v", err)
	}
}

func mustReadFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestReloadRefusesAStrangerNamingIdemgate: a stale pid file whose number
// another program took, one that merely mentions idemgate in its
// arguments (a shell, a pager on idemgate's log), is refused: SIGHUP
// would end it. Only an idemgate serve is signalled.
func TestReloadRefusesAStrangerNamingIdemgate(t *testing.T) {
	t.Parallel()
	stranger := exec.Command("sh", "-c", "sleep 30; :", "/var/log/idemgate/serve.log")
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stranger.Process.Kill(); stranger.Wait() })
	pidFile := filepath.Join(t.TempDir(), "stale.pid")
	os.WriteFile(pidFile, fmt.Appendf(nil, "%d\n", stranger.Process.Pid), 0o600)
	r := run(t, "", "reload", "--pid-file", pidFile)
	if r.code == 0 || !strings.Contains(r.stderr, "is not idemgate") {
		t.Fatalf("%d %s", r.code, r.stderr)
	}
	if err := syscall.Kill(stranger.Process.Pid, 0); err != nil {
		t.Fatalf("the stranger was signalled (SIGHUP ends a shell): %v", err)
	}
}

// TestPidFileOfTheNextServeSurvives: a serve that stops removes the pid
// file only while it still names it; a serve started after it on the same
// pid file (a deploy starting the new one, then stopping the old) keeps
// its file, and can still be reloaded through it.
func TestPidFileOfTheNextServeSurvives(t *testing.T) {
	t.Parallel()
	up := newSlowUpstream(t, 0)
	pidFile := filepath.Join(t.TempDir(), "idemgate.pid")
	names := func(p *testenv.Process) bool {
		data, _ := os.ReadFile(pidFile)
		return strings.TrimSpace(string(data)) == fmt.Sprint(p.Cmd.Process.Pid)
	}
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("waited for %s", what)
			}
		}
	}
	old := startServing(t, writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "a.db"), up.srv.URL, ""), pidFile)
	waitFor("the old serve's pid file", func() bool { return names(old) })
	next := startServing(t, writeConfig(t, "sqlite:"+filepath.Join(t.TempDir(), "b.db"), up.srv.URL, ""), pidFile)
	waitFor("the next serve's pid file", func() bool { return names(next) })
	old.Cmd.Process.Signal(syscall.SIGTERM)
	<-old.Done
	if !names(next) {
		t.Fatal("the old serve, stopping, removed the next one's pid file")
	}
	if r := run(t, "", "reload", "--pid-file", pidFile); r.code != 0 {
		t.Fatalf("reload of the next serve: %d %s", r.code, r.stderr)
	}
	waitLog(t, next, "configuration reloaded", 1)
	next.Cmd.Process.Signal(syscall.SIGTERM)
	<-next.Done
	if _, err := os.Stat(pidFile); !os.IsNotExist(err) {
		t.Fatalf("the last serve left its pid file: %v", err)
	}
}
