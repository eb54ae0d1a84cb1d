package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// figures are one side of a comparison: throughput, and latencies in
// milliseconds (0: not measured, as for a throughput benchmark).
type figures struct {
	rate     float64
	p50, p99 float64
}

// line is one row of the suite's table: a surface on a store, the
// gateway against its floor, their ratio and the goal it is judged on.
type line struct {
	surface, store string
	floor          string
	c              int
	gw, fl         figures
	ratio          string // the figure the goal is about, as printed
	goal           string // "": information
	passed         bool
}

func (l line) verdict() string {
	switch {
	case l.goal == "":
		return "-"
	case l.passed:
		return "ok"
	}
	return "MISSED"
}

// stores are the suite's stores: the gateway target, the floor, and the
// name the Go benchmarks give the store.
var stores = []struct{ name, gw, floor, sub string }{
	{"SQLite", gwSQLite, floorSQLite, "sqlite"},
	{"PostgreSQL", gwPostgres, floorPG, "postgres"},
}

// fig is a row's figures, or none.
func fig(r *result) figures {
	if r == nil {
		return figures{}
	}
	return figures{rate: r.rate, p50: ms(r.p50), p99: ms(r.p99)}
}

// httpLines are the HTTP surfaces' comparisons, from the rounds' rows.
func httpLines(r map[row]*result, lo, hi int) []line {
	var out []line
	for _, s := range stores {
		gw, ok := r[row{s.gw, "new-key", hi}]
		if !ok {
			continue
		}
		floorGoal := map[string]float64{"SQLite": 2, "PostgreSQL": 1.5}[s.name]
		out = append(out, rateLine("HTTP new keys", s.name, "two-commit floor", hi, gw, r[row{s.floor, "new-key", hi}],
			floorGoal))
		out = append(out, rateLine("HTTP new keys", s.name, "reverse proxy", hi, gw, r[row{proxy, "new-key", hi}], 0))
		gw1, rp1 := r[row{s.gw, "new-key", lo}], r[row{proxy, "new-key", lo}]
		if gw1 != nil && rp1 != nil {
			over := ms(gw1.p50 - rp1.p50)
			out = append(out, line{surface: "HTTP new keys, p50 overhead", store: s.name, floor: "reverse proxy", c: lo,
				gw: fig(gw1), fl: fig(rp1), ratio: fmt.Sprintf("+%.3f ms", over), goal: "≤ +0.5 ms", passed: over <= 0.5})
		}
		out = append(out, rateLine("HTTP replays", s.name, "reverse proxy", hi, r[row{s.gw, "replay", hi}],
			r[row{proxy, "replay", hi}], 1.5))
		if act, w := r[row{s.gw, action, hi}], r[row{s.gw, "new-key", hi}]; act != nil && w != nil {
			ratio := float64(act.p50) / float64(w.p50)
			out = append(out, line{surface: "action effect (reserve + complete)", store: s.name,
				floor: "proxied write, same size", c: hi, gw: fig(act), fl: fig(w),
				ratio: fmt.Sprintf("p50 %.2f×", ratio), goal: "≤ 1.3×", passed: ratio <= 1.3})
		}
	}
	return out
}

// rateLine compares two rows' throughput; want 0 is information.
func rateLine(surface, store, floor string, c int, gw, fl *result, want float64) line {
	l := line{surface: surface, store: store, floor: floor, c: c, gw: fig(gw), fl: fig(fl)}
	if gw == nil || fl == nil {
		l.ratio = "-"
		return l
	}
	ratio := gw.rate / fl.rate
	l.ratio = fmt.Sprintf("%.2f×", ratio)
	if want > 0 {
		l.goal, l.passed = fmt.Sprintf("≥ %.1f×", want), ratio >= want
	}
	return l
}

// goLines are the surfaces measured by Go benchmarks (gobench.go):
// medians over their -count runs. commit is each store's median one-row
// commit, in ms, the unit of the MCP proxy's budget.
func goLines(g map[string]map[string]float64, commit map[string]float64) []line {
	var out []line
	for _, s := range stores {
		direct, proxied := g["BenchmarkMCPProxy/"+s.sub+"/direct/c=1"], g["BenchmarkMCPProxy/"+s.sub+"/proxy/c=1"]
		if direct != nil && proxied != nil {
			d, p := benchFigures(direct), benchFigures(proxied)
			over, budget := p.p50-d.p50, 2*commit[s.sub]+d.p50+0.3
			out = append(out, line{surface: "MCP guarded tools/call", store: s.name, floor: "direct MCP call", c: 1,
				gw: p, fl: d, ratio: fmt.Sprintf("+%.3f ms", over),
				goal: fmt.Sprintf("≤ +%.2f ms (2 commits + 1 exchange + 0.3)", budget), passed: over <= budget})
		}
		for _, broker := range consumerBenches {
			at := broker.bench + "/" + s.sub + "/concurrency=16/"
			if bare, gw := g[at+"bare"], g[at+"idemgate"]; bare != nil && gw != nil {
				out = append(out, throughputLine("consumer ("+broker.name+")", s.name, "bare consumer", 16, gw, bare,
					"msgs/s", 0.7))
			}
		}
		byHand, relay := g["BenchmarkByHand"], g["BenchmarkRelay/"+s.sub]
		if byHand != nil && relay != nil {
			out = append(out, throughputLine("outbox relay", s.name, "same POSTs by hand", 16, relay, byHand,
				"effects/s", 0.3))
		}
	}
	return out
}

// consumerBenches are the consumer benchmarks, by broker.
var consumerBenches = []struct{ bench, name string }{{"BenchmarkConsumer", "NATS JetStream"},
	{"BenchmarkAMQPConsumer", "RabbitMQ"}}

// consumerCommits are the consumer benchmarks' group commits, a line
// each: the steps that shared a commit, what a commit took and the share
// of the run the commits took (on SQLite, the writer's busy share).
func consumerCommits(g map[string]map[string]float64) string {
	var b strings.Builder
	for _, broker := range consumerBenches {
		for _, s := range stores {
			m := g[broker.bench+"/"+s.sub+"/concurrency=16/idemgate"]
			if m == nil || m["steps/commit"] == 0 {
				continue
			}
			fmt.Fprintf(&b, "%s %s, concurrency 16: %.1f steps/commit, %.3f ms/commit, commits %.0f%% of the run\n",
				broker.bench, s.name, m["steps/commit"], m["ms/commit"], 100*m["commit-share"])
		}
	}
	return b.String()
}

// benchFigures are a latency benchmark's: its p50 and p99 when it
// reports them, else its mean for the p50.
func benchFigures(m map[string]float64) figures {
	f := figures{p50: m["p50-ms"], p99: m["p99-ms"]}
	if f.p50 == 0 {
		f.p50 = m["ns/op"] / 1e6
	}
	if ns := m["ns/op"]; ns > 0 {
		f.rate = 1e9 / ns
	}
	return f
}

// throughputLine compares two throughput benchmarks.
func throughputLine(surface, store, floor string, c int, gw, fl map[string]float64, unit string, want float64) line {
	ratio := gw[unit] / fl[unit]
	return line{surface: surface, store: store, floor: floor, c: c, gw: figures{rate: gw[unit]},
		fl: figures{rate: fl[unit]}, ratio: fmt.Sprintf("%.2f×", ratio), goal: fmt.Sprintf("≥ %.1f×", want),
		passed: ratio >= want}
}

// printLines prints the suite's table.
func printLines(w io.Writer, lines []line) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "surface\tstore\tfloor\tc\treq/s\tfloor req/s\tp50 ms\tfloor p50\tp99 ms\tfloor p99\tratio\tgoal\t")
	for _, l := range lines {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s %s\t\n", l.surface, l.store, l.floor, l.c,
			num(l.gw.rate, 0), num(l.fl.rate, 0), num(l.gw.p50, 3), num(l.fl.p50, 3), num(l.gw.p99, 3),
			num(l.fl.p99, 3), l.ratio, l.goal, l.verdict())
	}
	return tw.Flush()
}

// num prints a figure with prec decimals, or "-" when not measured.
func num(v float64, prec int) string {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return "-"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

// runInfo is what the Markdown says of the run: its command, its
// machine and the load on it.
type runInfo struct {
	command            string
	started, ended     time.Time
	loadBefore, loadAt string
}

// writeMarkdown writes the suite's table, and the HTTP targets' rows,
// as Markdown to path.
func writeMarkdown(path string, info runInfo, lines []line, detail string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# idemgate bench: one run\n\n`%s`, %s to %s UTC.\n\n", info.command,
		info.started.UTC().Format("2006-01-02 15:04"), info.ended.UTC().Format("15:04"))
	fmt.Fprintf(&b, "Machine: %s. Load average (1, 5, 15 min) before the run %s, after it %s.\n\n", machine(),
		info.loadBefore, info.loadAt)
	b.WriteString("Every ratio compares two rows measured in the same run (the HTTP targets in interleaved rounds); " +
		"req/s and latencies are this run's and move with the machine's load.\n\n")
	b.WriteString("| surface | store | floor | c | req/s | floor req/s | p50 ms | floor p50 | p99 ms | floor p99 | ratio | goal | |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n")
	for _, l := range lines {
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", l.surface, l.store,
			l.floor, l.c, num(l.gw.rate, 0), num(l.fl.rate, 0), num(l.gw.p50, 3), num(l.fl.p50, 3), num(l.gw.p99, 3),
			num(l.fl.p99, 3), l.ratio, l.goal, l.verdict())
	}
	b.WriteString("\nEvery HTTP target, every row:\n\n```\n" + detail + "```\n")
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// machine names the CPU and its cores.
func machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores (GOMAXPROCS), shared with other work", model, runtime.GOMAXPROCS(0))
}

// loadAverage is /proc/loadavg's first three figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], ", ")
}

// suiteOptions are -suite's flags.
type suiteOptions struct {
	n, rounds, count int
	conc, pg, md     string
	quick            bool
	command          string
}

// runSuite measures every surface in one run: the HTTP targets in
// interleaved rounds, then the Go benchmarks, and prints (and writes as
// Markdown) one table of each gateway against its floor.
func runSuite(o suiteOptions) error {
	info := runInfo{command: o.command, started: time.Now(), loadBefore: loadAverage()}
	if o.quick {
		o.n, o.rounds, o.count = 300, 3, 1
	}
	excluded = []string{auditSQLite, auditPostgres, unobservedSQLite}
	var detail strings.Builder
	out, err := run(o.n, o.rounds, o.conc, o.pg, false, false, "", io.MultiWriter(os.Stdout, &detail))
	if err != nil {
		return err
	}
	lo, hi := slices.Min(out.concurrencies), slices.Max(out.concurrencies)
	lines := httpLines(out.results, lo, hi)
	benches := goBenches(o.quick)
	if o.pg == "" {
		benches = benches[:0] // their PostgreSQL halves need the server
	}
	g, err := runGoBenches(benches, o.count, os.Stdout)
	if err != nil {
		return err
	}
	commit := map[string]float64{}
	for _, s := range stores {
		commit[s.sub] = ms(median(out.commits[s.gw].raw))
	}
	lines = append(lines, goLines(g, commit)...)
	info.ended, info.loadAt = time.Now(), loadAverage()
	notes := consumerCommits(g)
	fmt.Printf("\nthe consumers' group commits:\n%s", notes)
	fmt.Printf("\nevery surface against its floor, load average %s before, %s after:\n", info.loadBefore, info.loadAt)
	if err := printLines(os.Stdout, lines); err != nil {
		return err
	}
	if o.md == "" {
		return nil
	}
	fmt.Println("written to", o.md)
	return writeMarkdown(o.md, info, lines, detail.String()+"\nthe consumers' group commits:\n"+notes)
}
