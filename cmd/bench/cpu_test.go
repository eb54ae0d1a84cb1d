package main

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The ceiling is what the CPU section's verdict rests on: a row's rate
// with every core busy at its CPU a request, set beside the floor's
// measured rate. A wrong factor of cores would make a bound look like a
// wait, or the other way round.
func TestCPUCeiling(t *testing.T) {
	cores := float64(runtime.NumCPU())
	gw := &cpuRow{requests: 4000, wall: time.Second, machine: time.Second}
	if got, want := gw.ceiling(), cores*4000; got != want {
		t.Fatalf("ceiling: %v, want %v", got, want)
	}
	if got, want := gw.busy(), 1/cores; got != want {
		t.Fatalf("busy: %v, want %v", got, want)
	}
	floor := &cpuRow{requests: 2000, wall: time.Second, machine: time.Second}
	e := &benchEnv{cpu: map[row]*cpuRow{{gwPostgres, "new-key", 32}: gw, {floorPG, "new-key", 32}: floor}}
	var out strings.Builder
	if err := printCPU(&out, e, 32); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("(d) idemgate postgres new keys: at its CPU a request, at most %.2f× the floor's measured "+
		"rate (%.0f against 2000 req/s)", 2*cores, 4000*cores)
	if !strings.Contains(out.String(), want) {
		t.Fatalf("no verdict for PostgreSQL's gateway:\n%s", out.String())
	}
	if strings.Contains(out.String(), "idemgate sqlite new keys") {
		t.Fatalf("a verdict without the rows it needs:\n%s", out.String())
	}
}
