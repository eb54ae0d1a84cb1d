package storetest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// childEnv marks a test binary started by RaceProcesses.
const childEnv = "IDEMGATE_STORETEST_CHILD"

// Process race parameters: keys raced, and goroutines per key per process.
const (
	processKeys    = 20
	processRacers  = 16
	processTimeout = 2 * time.Minute
)

// IsChild reports whether this test binary was started by RaceProcesses.
func IsChild() bool { return os.Getenv(childEnv) != "" }

// Child is the body of a child process. The store package's TestMain calls
// it when IsChild, with a function that opens and migrates its store on the
// DSN that RaceProcesses passed, and exits. The child migrates and reserves only after
// its parent releases every child at once (by closing its stdin), then
// prints one line per reservation: "owned|seen KEY OPID".
func Child(open func(ctx context.Context, dsn string) (ledger.Store, error)) {
	c, cancel := context.WithTimeout(context.Background(), processTimeout)
	defer cancel()
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // the barrier
	s, err := open(c, os.Getenv(childEnv))
	if err != nil {
		fmt.Println("error open:", err)
		os.Exit(3)
	}
	defer s.Close()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for k := range processKeys {
		for range processRacers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				key := fmt.Sprintf("proc-key-%d", k)
				r, err := s.Reserve(c, ledger.ReserveParams{Namespace: ledger.NamespaceClients, Kind: ledger.KindRoute,
					Tenant: "acme", Key: key, Route: "/r",
					Fingerprint: "sha256:aaaa", Lease: Long, Retention: Retention, Actor: fmt.Sprint("pid-", os.Getpid())})
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					fmt.Println("error reserve:", err)
				case r.Owned():
					fmt.Println("owned", key, r.Op.ID)
				default:
					fmt.Println("seen", key, r.Op.ID)
				}
			}()
		}
	}
	wg.Wait()
}

// RaceProcesses starts n copies of this test binary as children (see
// Child), releases them at once on dsn, an empty store that none
// of them has migrated yet, and checks that they migrated it safely and that
// every key has exactly one owner across all processes.
func RaceProcesses(t *testing.T, dsn string, n int) {
	var wg sync.WaitGroup
	outputs := make([][]string, n)
	var stdins []io.WriteCloser
	for i := range n {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), childEnv+"="+dsn)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		mustOK(t, err)
		stdout, err := cmd.StdoutPipe()
		mustOK(t, err)
		mustOK(t, cmd.Start())
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() || sc.Text() != "ready" {
			t.Fatalf("child %d did not start: %q", i, sc.Text())
		}
		stdins = append(stdins, stdin)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for sc.Scan() {
				outputs[i] = append(outputs[i], sc.Text())
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("child %d: %v", i, err)
			}
		}()
	}
	for _, in := range stdins {
		in.Close() // go
	}
	wg.Wait()
	checkProcessRace(t, outputs)
}

func checkProcessRace(t *testing.T, outputs [][]string) {
	owners := map[string][]int{}
	opOf := map[string]string{}
	for i, lines := range outputs {
		for _, line := range lines {
			f := strings.Fields(line)
			if len(f) != 3 || (f[0] != "owned" && f[0] != "seen") {
				t.Fatalf("child %d: %s", i, line)
			}
			if prev, ok := opOf[f[1]]; ok && prev != f[2] {
				t.Fatalf("key %s is operation %s in one place and %s in another", f[1], prev, f[2])
			}
			opOf[f[1]] = f[2]
			if f[0] == "owned" {
				owners[f[1]] = append(owners[f[1]], i)
			}
		}
		if want := processKeys * processRacers; len(lines) != want {
			t.Fatalf("child %d printed %d lines, want %d", i, len(lines), want)
		}
	}
	spread := map[int]int{}
	for k := range processKeys {
		key := fmt.Sprintf("proc-key-%d", k)
		if len(owners[key]) != 1 {
			t.Fatalf("key %s has %d owners across processes (%v), want 1", key, len(owners[key]), owners[key])
		}
		spread[owners[key][0]]++
	}
	t.Logf("%d keys, %d processes × %d racers each; owners per process: %v", processKeys, len(outputs),
		processRacers, spread)
}
