package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idemgate/idemgate/internal/scenarios"
)

// TestDemo runs idemgate demo as a process: every act performs the effects
// it should, and the table says so.
func TestDemo(t *testing.T) {
	t.Parallel()
	r := run(t, "", "demo")
	if r.code != 0 {
		t.Fatalf("demo exited %d:\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	if n := strings.Count(r.stdout, "  ok\n"); n != len(scenarios.Demo()) || strings.Contains(r.stdout, "WRONG") {
		t.Fatalf("want %d acts ok:\n%s", len(scenarios.Demo()), r.stdout)
	}
	for _, want := range []string{"Idempotent-Replayed: true", "fingerprint_mismatch", "1 executed, 49 replayed",
		"Idempotency-Duplicate-Of", "is not immutable", "504 outcome_unknown", "$ idemgate ops resolve op_",
		"202 approval_required", "the same approval apr_", "403 approval_denied",
		"every one under a checkpoint signed by the gateway", "$ idemgate audit trace op_", " resolved ",
		"Forwarded upstream: 1 (by run demo-agent-", "never a creation: 1."} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the story lacks %q", want)
		}
	}
	if strings.Contains(r.stdout, `"level"`) || r.stderr != "" {
		t.Errorf("log noise on the terminal:\n%s\n%s", r.stdout, r.stderr)
	}
}

// TestDemoCountsWrongEffects checks the judge: an act whose count differs
// from its expectation is WRONG, and counted as such.
func TestDemoCountsWrongEffects(t *testing.T) {
	t.Parallel()
	e, err := startDemo(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer e.stop()
	var out bytes.Buffer
	e.out = &out
	steps := scenarios.Demo()[:1]
	steps[0].Expected = 2 // it creates one ticket
	if failed := e.play(context.Background(), steps); failed != 1 || !strings.Contains(out.String(), "WRONG") {
		t.Fatalf("%d failed:\n%s", failed, out.String())
	}
}

// demo --help says what the demo does: every act, how many, and how long
// it takes.
func TestDemoHelpIsTrue(t *testing.T) {
	t.Parallel()
	r := run(t, "", "demo", "--help")
	acts := scenarios.Demo()
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("%d acts", len(acts))) ||
		strings.Contains(r.stdout, "half a minute") {
		t.Fatalf("demo --help:\n%s", r.stdout)
	}
	for _, a := range acts {
		if !strings.Contains(r.stdout, a.Action) {
			t.Errorf("demo --help does not name the act %q:\n%s", a.Action, r.stdout)
		}
	}
}

// demo --keep says where everything is once the story is told: the web
// page and the approver's token to sign in with, /metrics and a token
// that reads it; each works, and the demo stops cleanly on SIGINT.
func TestDemoKeepSaysWhereEverythingIs(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(child, "demo", "--keep")
	cmd.Env = childEnv()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	text := readUntil(t, stdout, "Ctrl-C")
	if dir := regexp.MustCompile(`stay in (\S+)`).FindStringSubmatch(text); dir != nil {
		t.Cleanup(func() { os.RemoveAll(dir[1]) }) // --keep keeps them
	}
	ui := regexp.MustCompile(`http://127\.0\.0\.1:\d+/ui/`).FindString(text)
	metrics := regexp.MustCompile(`curl -s (http://127\.0\.0\.1:\d+/metrics) -H 'Authorization: Bearer (demo-[a-z]+-token)'`).
		FindStringSubmatch(text)
	if ui == "" || metrics == nil || !strings.Contains(text, demoApproverToken) {
		t.Fatalf("--keep does not say where the web page, /metrics and the approver's token are:\n%s", text)
	}
	if status, _ := get(t, ui, ""); status != 200 {
		t.Errorf("the web page %s: %d", ui, status)
	}
	if status, body := get(t, metrics[1], metrics[2]); status != 200 || !strings.Contains(body, "idemgate_") {
		t.Errorf("%s: %d %.200s", metrics[1], status, body)
	}
	deploy := regexp.MustCompile(`curl -i (\S+/v1/deployments) .*\n.* -d '(.*)'`).FindStringSubmatch(text)
	if deploy == nil {
		t.Fatalf("no production deploy to approve:\n%s", text)
	}
	req, _ := http.NewRequest("POST", deploy[1], strings.NewReader(deploy[2]))
	req.Header.Set("Authorization", "Bearer "+demoAgentToken)
	req.Header.Set("Idempotency-Key", "try-deploy")
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 202 {
		t.Errorf("the production deploy to approve: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("demo --keep after SIGINT: %v", err)
	}
}

// readUntil reads r (in the background, to its end) until what it read
// holds the marker and then a quiet moment, and returns what it read.
func readUntil(t *testing.T, r io.Reader, marker string) string {
	t.Helper()
	var mu sync.Mutex
	var b strings.Builder
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			mu.Lock()
			b.WriteString(sc.Text() + "\n")
			mu.Unlock()
		}
	}()
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		text := b.String()
		mu.Unlock()
		if strings.Contains(text, marker) {
			time.Sleep(300 * time.Millisecond) // the rest of what follows it
			mu.Lock()
			defer mu.Unlock()
			return b.String()
		}
	}
	t.Fatalf("no %q within 90s", marker)
	return ""
}

// get GETs url, with a bearer token if one is given.
func get(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
