// Command bench measures, side by side in one run, one trivial upstream
// reached through:
//
//	(a) direct calls;
//	(b) a plain tuned httputil.ReverseProxy;
//	(c) idemgate on SQLite, and (e) its raw floor: the same job by hand on
//	    SQLite, two commits that wait for the disk (bench/floor.go);
//	(d) idemgate on PostgreSQL, and (f) its raw floor on PostgreSQL;
//
// for new-key writes and for replays, at each concurrency; on (c) and (d)
// also action effects, each a reservation and its completion over HTTP,
// beside their new-key writes (bench/actions.go). It prints throughput,
// p50 and p99, the median latency of one durable commit on each store,
// and the checks of the hardening and performance issues with their ratios.
//
//	go run ./bench [-n 5000] [-c 1,32] [-postgres DSN | -postgres=] [-jwt] [-only NAME]
//
// With -suite (make bench) it measures every surface against its floor in
// one run: these HTTP rounds, then the Go benchmarks of the MCP proxy
// against a direct MCP call, a consumer against a bare consumer, and the
// outbox relay against the same POSTs by hand (gobench.go); it prints one
// table, p50, p99 and each ratio judged against issue 31's goals, and
// writes it as Markdown (-md). -quick makes it a short smoke run.
//
// With -jwt, one more gateway with auth.jwt is reached with the static
// token and with a JWT, in the same rounds (jwt.go).
//
// With -scale it measures instead 1, 2 and 3 gateways on one PostgreSQL
// (scale.go): new keys and replays, the CPU spent and the server's commits
// per request, for docs/capacity.md's model.
//
// With -traces it measures instead the gateway's cost of OpenTelemetry
// traces (traces.go): on each store, a build without tracing wiring, one
// with tracing off, one exporting to a local OTLP receiver.
//
// Everything runs in this process on loopback, so every variant shares the
// same cores with the load generator: compare rows, not absolute numbers.
// A disk's commit latency drifts from minute to minute (here between 0.3
// and 0.9 ms), so the targets are measured in interleaved rounds: each
// round sends every target its share of the requests in turn, the order
// rotating, and samples the commit latencies; a row pools its rounds.
// Everything is warmed up first (connections, prepared statements).
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	n := flag.Int("n", 5000, "requests per row, over all rounds")
	rounds := flag.Int("rounds", 5, "interleaved rounds per row")
	conc := flag.String("c", "1,32", "concurrencies")
	pg := flag.String("postgres", envOr("IDEMGATE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		"PostgreSQL server for (d) and (f); empty to skip them")
	calls := flag.Bool("calls", false, "count the store calls of (c) and (d)'s requests, and print them per row")
	jwt := flag.Bool("jwt", false, "also measure one gateway with auth.jwt, reached with a static token and with a JWT")
	only := flag.String("only", "", "measure only the targets whose name holds this (e.g. +jwt); all are set up")
	cpuprofile := flag.String("cpuprofile", "", "write a CPU profile of the whole run (servers and clients) to this file")
	traces := flag.Bool("traces", false, "measure the gateways without tracing wiring, with tracing off and on (OTLP to a "+
		"local receiver), and nothing else")
	suite := flag.Bool("suite", false, "measure every surface: the HTTP rounds, then the Go benchmarks of the MCP proxy, "+
		"the consumers and the outbox relay, and print one table of the gateway against each floor")
	quick := flag.Bool("quick", false, "with -suite: a short run, for a smoke test (figures too noisy to judge)")
	md := flag.String("md", "bench.md", "with -suite: write the table as Markdown to this file (empty: none)")
	goCount := flag.Int("count", 3, "with -suite: runs of each Go benchmark (their medians are reported)")
	scale := flag.Bool("scale", false, "measure 1, 2 and 3 gateways on one PostgreSQL (-c: 32,96 unless given), new keys "+
		"and replays, with the CPU and the server's commits per request, and nothing else")
	flag.IntVar(&pgBatches, "batches", 0, "the PostgreSQL gateway's step transactions in flight (0: the store's default)")
	flag.Parse()
	if *cpuprofile != "" {
		stop, err := profileCPU(*cpuprofile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		defer stop()
	}
	do := func() error {
		_, err := run(*n, *rounds, *conc, *pg, *calls, *jwt, *only, os.Stdout)
		return err
	}
	if *suite {
		do = func() error {
			return runSuite(suiteOptions{n: *n, rounds: *rounds, conc: *conc, pg: *pg, quick: *quick, md: *md,
				count: *goCount, command: strings.Join(os.Args, " ")})
		}
	}
	if *scale {
		if !isSet("c") {
			*conc = "32,96"
		}
		do = func() error { return runScale(*n, *rounds, *conc, *pg, os.Stdout) }
	}
	if *traces {
		do = func() error { return runTraces(*n, *rounds, *conc, *pg) }
	}
	if err := do(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// isSet reports whether the flag was given.
func isSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// ticketBody is every write's body, and every action's command;
// ticketAnswer is the upstream's answer to it, and every action's result.
const (
	ticketBody   = `{"title":"bench","priority":2}`
	ticketAnswer = `{"id":"T-1","status":"open"}`
)

// row names one measurement.
type row struct {
	target string
	mode   string
	c      int
}

// outcome is what a run measured: its rows, and each store's commit
// latencies.
type outcome struct {
	results       map[row]*result
	commits       map[string]commitLatency
	concurrencies []int
}

// run measures the HTTP targets and prints every row to w, then the
// checks (on stdout).
func run(n, rounds int, concList, pgDSN string, counting, jwt bool, only string, w io.Writer) (outcome, error) {
	concurrencies, err := parseConcurrencies(concList)
	if err != nil || rounds < 1 || n < rounds {
		return outcome{}, fmt.Errorf("-n %d -rounds %d -c %q: want n >= rounds >= 1: %v", n, rounds, concList, err)
	}
	upstream := newUpstream()
	defer upstream.Close()
	env, err := setup(upstream.URL, pgDSN, counting, jwt)
	defer env.cleanup()
	if err != nil {
		return outcome{}, err
	}
	if only != "" {
		env.targets = slices.DeleteFunc(env.targets, func(t target) bool { return !strings.Contains(t.name, only) })
		for name := range env.logs {
			if !strings.Contains(name, only) {
				delete(env.logs, name) // not loaded: nothing to seal
			}
		}
	}
	env.drop(excluded)
	results, commits, err := measureAll(env, n, rounds, concurrencies)
	if err != nil {
		return outcome{}, err
	}
	out := outcome{results, commits, concurrencies}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\twrites\tconcurrency\treq/s\tp50 ms\tp99 ms\t")
	for _, t := range env.targets {
		for _, mode := range t.modes() {
			for _, c := range concurrencies {
				r := results[row{t.name, mode, c}]
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.3f\t%.3f\t\n", t.name, mode, c, r.rate, ms(r.p50), ms(r.p99))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return out, err
	}
	if err := printGroupCommits(w, env, concurrencies); err != nil {
		return out, err
	}
	if err := printCPU(w, env, slices.Max(concurrencies)); err != nil {
		return out, err
	}
	report(os.Stdout, commits, results, concurrencies)
	if env.calls != nil {
		printCalls(os.Stdout, env, env.calls, concurrencies)
	}
	return out, sealed(os.Stdout, env)
}

// excluded are the targets a run does not measure (set up all the same):
// the suite leaves out the twins that other issues' checks compare.
var excluded []string

// drop takes the named targets out of the run.
func (e *benchEnv) drop(names []string) {
	e.targets = slices.DeleteFunc(e.targets, func(t target) bool { return slices.Contains(names, t.name) })
	for _, name := range names {
		delete(e.logs, name) // not loaded: nothing to seal
	}
}

// newUpstream is the trivial upstream every target reaches: it reads the
// write and answers ticketAnswer.
func newUpstream() *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(ticketAnswer))
	}))
}

// modes are the rounds' kinds of writes; action rows are measured in the
// new-key rounds (see jobs).
var modes = []string{"new-key", "replay"}

// action is the mode of an action effect: reserve, then complete.
const action = "action"

// modes are the target's rows' modes.
func (t target) modes() []string {
	if t.action {
		return append(slices.Clone(modes), action)
	}
	return modes
}

// job is one share of a round: a target in a mode.
type job struct {
	t    target
	mode string
}

// jobs are the shares of one round of mode: every target's, and in the
// new-key rounds the gateways' action effects too, so that an action row
// is measured beside the proxied writes it is compared with.
func jobs(targets []target, mode string) []job {
	var out []job
	for _, t := range targets {
		out = append(out, job{t, mode})
	}
	for _, t := range targets {
		if mode == "new-key" && t.action {
			out = append(out, job{t, action})
		}
	}
	return out
}

// measureAll warms every target up, then measures each row in rounds,
// every target in turn within a round, sampling the stores' commit
// latencies in each round of the c=1 new keys.
func measureAll(env *benchEnv, n, rounds int, concurrencies []int) (map[row]*result, map[string]commitLatency, error) {
	hi, lo := slices.Max(concurrencies), slices.Min(concurrencies)
	for _, t := range env.targets {
		for _, mode := range t.modes() {
			if _, err := measureOnce(t, mode, max(n/5, hi), hi); err != nil {
				return nil, nil, fmt.Errorf("%s %s warm-up: %w", t.name, mode, err)
			}
		}
	}
	results := map[row]*result{}
	commits := map[string]commitLatency{}
	for _, mode := range modes {
		js := jobs(env.targets, mode)
		for _, c := range concurrencies {
			for r := range rounds {
				for i := range js {
					j := js[(i+r)%len(js)]
					key := row{j.t.name, j.mode, c}
					rd, err := env.timed(key, func() (round, error) {
						return env.counted(key, func() (round, error) {
							return env.committing(key, func() (round, error) { return measureOnce(j.t, j.mode, n/rounds, c) })
						})
					})
					if err != nil {
						return nil, nil, fmt.Errorf("%s %s c=%d: %w", j.t.name, j.mode, c, err)
					}
					if results[key] == nil {
						results[key] = &result{}
					}
					results[key].add(rd)
				}
				if mode == "new-key" && c == lo {
					if err := sampleCommits(env, commits, r*commitSamples, commitSamples/rounds); err != nil {
						return nil, nil, err
					}
				}
			}
		}
	}
	return results, commits, nil
}

// commitLatency is a store's commit latency samples, raw and ledger step.
type commitLatency struct{ raw, step []time.Duration }

// sampleCommits adds k samples of each store's commits.
func sampleCommits(env *benchEnv, into map[string]commitLatency, from, k int) error {
	for name, p := range env.commits {
		raw, err := timed(p.raw, from, k)
		if err != nil {
			return fmt.Errorf("%s commit probe: %w", name, err)
		}
		step, err := timed(p.step, from, k)
		if err != nil {
			return fmt.Errorf("%s step probe: %w", name, err)
		}
		c := into[name]
		into[name] = commitLatency{raw: append(c.raw, raw...), step: append(c.step, step...)}
	}
	return nil
}

func parseConcurrencies(list string) ([]int, error) {
	var out []int
	for _, c := range strings.Split(list, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("-c %q", list)
		}
		out = append(out, v)
	}
	return out, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// profileCPU starts a CPU profile into path; stop ends and writes it.
func profileCPU(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
