package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// goBench is one package's Go benchmarks that the suite runs: the
// surfaces whose floor is not an HTTP target of this process (an MCP
// upstream, a bare consumer, POSTs by hand). They run as go test runs
// them, in a child process, after the HTTP rounds; within one benchmark
// the gateway and its floor are sub-benchmarks of the same run.
type goBench struct {
	pkg, pattern string
	benchtime    string // full mode; quick mode divides it (see goBenches)
}

// goBenches are the suite's Go benchmarks; quick shortens them.
func goBenches(quick bool) []goBench {
	b := []goBench{
		{"./cmd/internal/server", `^BenchmarkMCPProxy$/^(sqlite|postgres)$/^(direct|proxy)$/^c=1$`, "400x"},
		{"./cmd/internal/server", `^Benchmark(AMQP)?Consumer$/^(sqlite|postgres)$/^concurrency=16$`, "3000x"},
		{"./outbox", `^Benchmark(ByHand|Relay)$`, "3000x"},
	}
	if quick {
		for i := range b {
			b[i].benchtime = "150x"
		}
	}
	return b
}

// benchLine is one result line of go test -bench: the benchmark's name
// (without the -GOMAXPROCS suffix) and its figures by unit.
type benchLine struct {
	name    string
	figures map[string]float64
}

var benchLineRE = regexp.MustCompile(`^(Benchmark\S+?)(-\d+)?\s+\d+\s+(.*)$`)

// parseBench reads go test -bench output; a name measured more than once
// (-count) keeps each line, in order.
func parseBench(r io.Reader) []benchLine {
	var out []benchLine
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		m := benchLineRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		f := strings.Fields(m[3])
		l := benchLine{name: m[1], figures: map[string]float64{}}
		for i := 0; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil {
				l.figures[f[i+1]] = v
			}
		}
		out = append(out, l)
	}
	return out
}

// runGoBenches runs each benchmark, echoing its output to log, and
// returns the medians of each figure by benchmark name.
func runGoBenches(benches []goBench, count int, log io.Writer) (map[string]map[string]float64, error) {
	var lines []benchLine
	for _, b := range benches {
		cmd := exec.Command("go", "test", "-run", "^$", "-bench", b.pattern, "-benchtime", b.benchtime,
			"-count", strconv.Itoa(count), b.pkg)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.MultiWriter(&out, log), os.Stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("go test -bench %s %s: %w", b.pattern, b.pkg, err)
		}
		lines = append(lines, parseBench(&out)...)
	}
	return medians(lines), nil
}

// medians pools the lines of each name: the median of each figure.
func medians(lines []benchLine) map[string]map[string]float64 {
	all := map[string]map[string][]float64{}
	for _, l := range lines {
		if all[l.name] == nil {
			all[l.name] = map[string][]float64{}
		}
		for unit, v := range l.figures {
			all[l.name][unit] = append(all[l.name][unit], v)
		}
	}
	out := map[string]map[string]float64{}
	for name, units := range all {
		out[name] = map[string]float64{}
		for unit, vs := range units {
			slices.Sort(vs)
			out[name][unit] = vs[len(vs)/2]
		}
	}
	return out
}
