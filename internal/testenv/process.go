package testenv

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Process is an idemgate server run as a real process by a test: ready
// once it logs {"msg":"listening","addr":…} on stderr, SIGKILLed when the
// test ends if it still runs.
type Process struct {
	Cmd  *exec.Cmd
	URL  string     // http://addr
	Done chan error // receives the process's exit, once
	mu   sync.Mutex
	logs []string
}

// StartProcess starts cmd and waits (20s at most) for it to listen.
func StartProcess(t testing.TB, cmd *exec.Cmd) *Process {
	t.Helper()
	return start(t, cmd, "listening")
}

// StartWorker starts cmd, a process that listens on nothing (a relay),
// and waits (20s at most) for it to log {"msg":ready}.
func StartWorker(t testing.TB, cmd *exec.Cmd, ready string) *Process {
	t.Helper()
	return start(t, cmd, ready)
}

func start(t testing.TB, cmd *exec.Cmd, ready string) *Process {
	t.Helper()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &Process{Cmd: cmd, Done: make(chan error, 1)}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.logs = append(p.logs, sc.Text())
			p.mu.Unlock()
			var line struct{ Msg, Addr string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == ready {
				select {
				case addr <- line.Addr:
				default: // said again (a worker's later rounds)
				}
			}
		}
		p.Done <- cmd.Wait()
	}()
	select {
	case a := <-addr:
		if a != "" {
			p.URL = "http://" + a
		}
	case err := <-p.Done:
		t.Fatalf("%v exited: %v", cmd.Args, err)
	case <-time.After(20 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("%v did not start", cmd.Args)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	return p
}

// Logs returns the stderr lines so far.
func (p *Process) Logs() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.logs...)
}

// Kill is SIGKILL: no shutdown, no last write. It returns once the
// process is gone.
func (p *Process) Kill() {
	p.Cmd.Process.Signal(syscall.SIGKILL)
	<-p.Done
}
