package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

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
