package main

import (
	"strings"
	"testing"
)

// The suite reads the Go benchmarks' lines as go test prints them; a
// change to their names or units would silently drop a surface from the
// table, which this catches.
func TestParseBenchAndLines(t *testing.T) {
	out := `goos: linux
BenchmarkMCPProxy/sqlite/direct/c=1-2   	     400	   1500000 ns/op	         1.200 p50-ms	         3.000 p99-ms
BenchmarkMCPProxy/sqlite/proxy/c=1-2    	     400	   4000000 ns/op	         3.500 p50-ms	         9.000 p99-ms
BenchmarkMCPProxy/sqlite/proxy/c=1-2    	     400	   4200000 ns/op	         3.700 p50-ms	         9.500 p99-ms
BenchmarkMCPProxy/sqlite/proxy/c=1-2    	     400	   4100000 ns/op	         3.600 p50-ms	         9.200 p99-ms
BenchmarkConsumer/postgres/concurrency=16/bare-2         	     150	    570961 ns/op	      1000 msgs/s
BenchmarkConsumer/postgres/concurrency=16/idemgate-2     	     150	   1261399 ns/op	       800 msgs/s
BenchmarkAMQPConsumer/postgres/concurrency=16/bare-2     	     150	    570961 ns/op	      1000 msgs/s
BenchmarkAMQPConsumer/postgres/concurrency=16/idemgate-2 	     150	   1261399 ns/op	         0.8535 commit-share	         2.503 ms/commit	       500 msgs/s	         7.864 steps/commit
BenchmarkByHand-2   	     150	    106562 ns/op	      9000 effects/s
BenchmarkRelay/postgres-2       	     150	    714058 ns/op	      1800 effects/s
PASS
`
	g := medians(parseBench(strings.NewReader(out)))
	if got := g["BenchmarkMCPProxy/sqlite/proxy/c=1"]["p50-ms"]; got != 3.6 {
		t.Fatalf("median p50 of the proxy: %v, want 3.6", got)
	}
	lines := goLines(g, map[string]float64{"sqlite": 0.5, "postgres": 0.6})
	var got []string
	for _, l := range lines {
		got = append(got, l.surface+" "+l.store+" "+l.ratio+" "+l.verdict())
	}
	want := []string{
		"MCP guarded tools/call SQLite +2.400 ms ok", // budget 2×0.5 + 1.2 + 0.3 = 2.5 ms
		"consumer (NATS JetStream) PostgreSQL 0.80× ok",
		"consumer (RabbitMQ) PostgreSQL 0.50× MISSED",
		"outbox relay PostgreSQL 0.20× MISSED",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	notes := "BenchmarkAMQPConsumer PostgreSQL, concurrency 16: 7.9 steps/commit, 2.503 ms/commit, commits 85% of the run\n"
	if got := consumerCommits(g); got != notes {
		t.Fatalf("consumer commits:\n%s\nwant:\n%s", got, notes)
	}
}
