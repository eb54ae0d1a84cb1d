package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// check is one of the hardening issue's targets, judged on this run.
type check struct {
	what   string
	got    string
	want   string // "": no target, the figure is information
	passed bool
}

// report prints the commit latencies and the checks, each with the figures
// it was judged on: ratios of rows measured in the same rounds.
func report(w io.Writer, commits map[string]commitLatency, r map[row]*result, concurrencies []int) {
	fmt.Fprintf(w, "\ncommit latency, median of %d spread over the c=1 new-key rounds, each waiting for the disk:\n",
		commitSamples)
	for _, name := range []string{gwSQLite, gwPostgres} {
		if c, ok := commits[name]; ok {
			fmt.Fprintf(w, "  %-24s one-row commit %.3f ms, one ledger step (a reservation) %.3f ms\n", name,
				ms(median(c.raw)), ms(median(c.step)))
		}
	}
	lo := slices.Min(concurrencies)
	fmt.Fprintf(w, "p50 overhead at c=%d over the reverse proxy, with its floor's (two durable commits and the same proxying, by hand):\n", lo)
	for _, s := range [][2]string{{gwSQLite, floorSQLite}, {gwPostgres, floorPG}} {
		gw, floor, rp := r[row{s[0], "new-key", lo}], r[row{s[1], "new-key", lo}], r[row{proxy, "new-key", lo}]
		if gw != nil && floor != nil && rp != nil {
			fmt.Fprintf(w, "  %-24s %.3f ms, its floor %.3f ms\n", s[0], ms(gw.p50-rp.p50), ms(floor.p50-rp.p50))
		}
	}
	fmt.Fprintln(w)
	if r[row{gwSQLite, action, lo}] != nil || r[row{gwPostgres, action, lo}] != nil {
		actionNote(w, slices.Max(concurrencies))
		fmt.Fprintln(w)
	}
	for _, c := range append(checks(commits, r, concurrencies), jwtChecks(r, slices.Max(concurrencies))...) {
		verdict := "ok"
		switch {
		case c.want == "":
			c.want, verdict = "(information, no target)", "-"
		case !c.passed:
			verdict = "MISSED"
		}
		fmt.Fprintf(w, "%-62s %-50s %-36s %s\n", c.what, c.got, c.want, verdict)
	}
}

// checks judges this run's rows against the hardening issue's targets.
func checks(commits map[string]commitLatency, r map[row]*result, concurrencies []int) []check {
	hi, lo := slices.Max(concurrencies), slices.Min(concurrencies)
	var checks []check
	for _, s := range []struct {
		gw, floor string
		want      float64
	}{{gwSQLite, floorSQLite, 2}, {gwPostgres, floorPG, 1}} {
		gwNew, ok := r[row{s.gw, "new-key", hi}]
		if !ok || r[row{proxy, "new-key", hi}] == nil || r[row{s.floor, "new-key", hi}] == nil {
			continue // -only left its comparisons out
		}
		floor := r[row{s.floor, "new-key", hi}]
		ratio := gwNew.rate / floor.rate
		checks = append(checks, check{fmt.Sprintf("%s new keys c=%d vs its two-commit floor", s.gw, hi),
			fmt.Sprintf("%.0f vs %.0f req/s: %.2f× (rounds %s)", gwNew.rate, floor.rate, ratio, rateRange(gwNew, floor)),
			fmt.Sprintf("≥ %.1f×", s.want), ratio >= s.want})
		for _, c := range concurrencies {
			gw, rp := r[row{s.gw, "replay", c}], r[row{proxy, "replay", c}]
			ratio := gw.rate / rp.rate
			checks = append(checks, check{fmt.Sprintf("%s replays c=%d vs the reverse proxy", s.gw, c),
				fmt.Sprintf("%.2f× (rounds %s)", ratio, rateRange(gw, rp)), "≥ 1.0×", ratio >= 1})
		}
		checks = append(checks, actionChecks(r, s.gw, concurrencies)...)
		checks = append(checks, auditChecks(r, s.gw, hi)...)
		if s.gw == gwSQLite {
			checks = append(checks, metricsCheck(r, hi)...)
		}
		over := r[row{s.gw, "new-key", lo}].p50 - r[row{proxy, "new-key", lo}].p50
		for _, c := range []struct {
			kind    string
			latency time.Duration
		}{{"one-row", median(commits[s.gw].raw)}, {"ledger-step", median(commits[s.gw].step)}} {
			budget := 2*c.latency + 500*time.Microsecond
			checks = append(checks, check{fmt.Sprintf("%s p50 overhead c=%d over the reverse proxy", s.gw, lo),
				fmt.Sprintf("%.3f ms", ms(over)), fmt.Sprintf("≤ 2 %s commits + 0.5 = %.3f ms", c.kind, ms(budget)),
				over <= budget})
		}
	}
	return checks
}

// rateRange is the lowest and highest round-by-round ratio of a's rate to
// b's, rounds paired in order.
func rateRange(a, b *result) string { return roundRange(a, b, round.rate) }

// roundRange is the lowest and highest round-by-round ratio of a figure
// of a's rounds to b's, rounds paired in order.
func roundRange(a, b *result, figure func(round) float64) string {
	var ratios []float64
	for i := range min(len(a.rounds), len(b.rounds)) {
		ratios = append(ratios, figure(a.rounds[i])/figure(b.rounds[i]))
	}
	if len(ratios) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f-%.2f", slices.Min(ratios), slices.Max(ratios))
}

// median of unsorted latencies.
func median(lat []time.Duration) time.Duration {
	if len(lat) == 0 {
		return 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[len(s)/2]
}

// auditChecks judges the audit log's cost: the same gateway with it on
// against it off, in the same rounds (issue 11: within 10% for new keys,
// 5% for replays, at the highest concurrency).
func auditChecks(r map[row]*result, gw string, hi int) []check {
	var out []check
	for _, m := range []struct {
		mode string
		want float64
	}{{"new-key", 0.90}, {"replay", 0.95}} {
		on, off := r[row{audited[gw], m.mode, hi}], r[row{gw, m.mode, hi}]
		if on == nil || off == nil {
			continue
		}
		ratio := on.rate / off.rate
		out = append(out, check{fmt.Sprintf("%s %s c=%d, audit log on vs off", gw, m.mode, hi),
			fmt.Sprintf("%.0f vs %.0f req/s: %.2f× (rounds %s)", on.rate, off.rate, ratio, rateRange(on, off)),
			fmt.Sprintf("≥ %.2f×", m.want), ratio >= m.want})
	}
	return out
}

// sealed reports how far each audited target's log is sealed and signed
// once the load stops: the sealer keeps up if the events left unsealed
// are sealed within a few seconds.
func sealed(w io.Writer, env *benchEnv) error {
	for _, name := range []string{auditSQLite, auditPostgres} {
		s, ok := env.logs[name]
		if !ok {
			continue
		}
		start, last := time.Now(), int64(-1)
		for time.Since(start) < 30*time.Second {
			c, err := s.LatestCheckpoint(context.Background(), "bench")
			if err != nil {
				return err
			}
			if c.Size == last {
				break
			}
			last = c.Size
			time.Sleep(1500 * time.Millisecond) // longer than checkpoint_interval
		}
		fmt.Fprintf(w, "%s: %d events sealed and signed, settled %.1f s after the load\n", name, last,
			time.Since(start).Seconds()-1.5)
	}
	return nil
}

// metricsCheck judges what observing every request costs the new-key path
// (issue 12: under 2% at the highest concurrency).
func metricsCheck(r map[row]*result, hi int) []check {
	on, off := r[row{gwSQLite, "new-key", hi}], r[row{unobservedSQLite, "new-key", hi}]
	if on == nil || off == nil {
		return nil
	}
	ratio := on.rate / off.rate
	return []check{{fmt.Sprintf("%s new-key c=%d, metrics on vs off", gwSQLite, hi),
		fmt.Sprintf("%.0f vs %.0f req/s: %.2f× (rounds %s)", on.rate, off.rate, ratio, rateRange(on, off)),
		"≥ 0.98×", ratio >= 0.98}}
}
