package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// check is one of the hardening issue's targets, judged on this run.
type check struct {
	what   string
	got    string
	want   string
	passed bool
}

// report prints the commit latencies and the checks, each with the figures
// it was judged on: ratios of rows measured in the same run.
func report(w io.Writer, e *benchEnv, r map[row]result, concurrencies []int) {
	fmt.Fprintf(w, "\ncommit latency, median of %d, each waiting for the disk:\n", commitSamples)
	for _, name := range []string{gwSQLite, gwPostgres} {
		if c, ok := e.commits[name]; ok {
			fmt.Fprintf(w, "  %-24s one-row commit %.3f ms, one ledger step (a reservation) %.3f ms\n", name, ms(c.raw), ms(c.step))
		}
	}
	for _, c := range checks(e, r, concurrencies) {
		verdict := "ok"
		if !c.passed {
			verdict = "MISSED"
		}
		fmt.Fprintf(w, "%-62s %-28s %-36s %s\n", c.what, c.got, c.want, verdict)
	}
}

// checks judges this run's rows against the hardening issue's targets.
func checks(e *benchEnv, r map[row]result, concurrencies []int) []check {
	hi, lo := slices.Max(concurrencies), slices.Min(concurrencies)
	var checks []check
	for _, s := range []struct {
		gw, floor string
		want      float64
	}{{gwSQLite, floorSQLite, 2}, {gwPostgres, floorPG, 1}} {
		gwNew, ok := r[row{s.gw, "new-key", hi}]
		if !ok {
			continue
		}
		ratio := gwNew.rate / r[row{s.floor, "new-key", hi}].rate
		checks = append(checks, check{fmt.Sprintf("%s new keys c=%d vs its two-commit floor", s.gw, hi),
			fmt.Sprintf("%.0f vs %.0f req/s: %.2f×", gwNew.rate, r[row{s.floor, "new-key", hi}].rate, ratio),
			fmt.Sprintf("≥ %.1f×", s.want), ratio >= s.want})
		for _, c := range concurrencies {
			ratio := r[row{s.gw, "replay", c}].rate / r[row{proxy, "replay", c}].rate
			checks = append(checks, check{fmt.Sprintf("%s replays c=%d vs the reverse proxy", s.gw, c),
				fmt.Sprintf("%.2f×", ratio), "≥ 1.0×", ratio >= 1})
		}
		over := r[row{s.gw, "new-key", lo}].p50 - r[row{proxy, "new-key", lo}].p50
		for _, c := range []struct {
			kind    string
			latency time.Duration
		}{{"one-row", e.commits[s.gw].raw}, {"step", e.commits[s.gw].step}} {
			budget := 2*c.latency + 500*time.Microsecond
			checks = append(checks, check{fmt.Sprintf("%s p50 overhead c=%d over the reverse proxy", s.gw, lo),
				fmt.Sprintf("%.3f ms", ms(over)), fmt.Sprintf("≤ 2 %s commits + 0.5 = %.3f ms", c.kind, ms(budget)),
				over <= budget})
		}
	}
	return checks
}
