package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// cpuRow is the CPU a row's rounds used: this process's (the load
// generator, the upstream, every gateway and floor), and the whole
// machine's (PostgreSQL's server too, and whatever else runs), beside the
// rounds' wall time and requests.
type cpuRow struct {
	requests            int
	wall, self, machine time.Duration
}

// timed runs measure, adding the CPU used meanwhile to key's row.
func (e *benchEnv) timed(key row, measure func() (round, error)) (round, error) {
	self0, machine0 := cpuTime(), machineTime()
	rd, err := measure()
	c := e.cpu[key]
	if c == nil {
		c = &cpuRow{}
		e.cpu[key] = c
	}
	c.self += cpuTime() - self0
	c.machine += machineTime() - machine0
	c.wall += rd.elapsed
	c.requests += len(rd.lat)
	return rd, err
}

// printCPU prints, for each row of writes at concurrency c, the CPU a
// request cost, and how busy the machine was: a row near 100% is bound by
// the machine's cores; one well below it, by something that waits (a
// disk, a lock, one connection's round trips). The ceiling is the rate
// the row's CPU a request allows with every core busy: a gateway whose
// ceiling is under a floor's measured rate cannot reach that floor by
// waiting less, only by spending less.
func printCPU(w io.Writer, e *benchEnv, c int) error {
	fmt.Fprintf(w, "\nCPU of each row of writes at c=%d (µs a request: this process's, the machine's; the machine's "+
		"busy share; the req/s that CPU allows with every core busy):\n", c)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\twrites\tprocess µs\tmachine µs\tmachine busy\tceiling req/s\t")
	for _, t := range e.targets {
		for _, mode := range t.modes() {
			r := e.cpu[row{t.name, mode, c}]
			if mode == "replay" || r == nil || r.requests == 0 || r.wall <= 0 || r.machine <= 0 {
				continue
			}
			n := float64(r.requests)
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.0f\t%.0f%%\t%.0f\t\n", t.name, mode, float64(r.self.Microseconds())/n,
				float64(r.machine.Microseconds())/n, 100*r.busy(), r.ceiling())
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, p := range [][2]string{{gwSQLite, floorSQLite}, {gwPostgres, floorPG}} {
		gw, floor := e.cpu[row{p[0], "new-key", c}], e.cpu[row{p[1], "new-key", c}]
		if gw == nil || floor == nil || gw.machine <= 0 || floor.wall <= 0 || floor.requests == 0 {
			continue
		}
		rate := float64(floor.requests) / floor.wall.Seconds()
		fmt.Fprintf(w, "%s new keys: at its CPU a request, at most %.2f× the floor's measured rate (%.0f against %.0f "+
			"req/s)\n", p[0], gw.ceiling()/rate, gw.ceiling(), rate)
	}
	return nil
}

// busy is the machine's busy share over the row's rounds.
func (r *cpuRow) busy() float64 {
	return r.machine.Seconds() / (r.wall.Seconds() * float64(runtime.NumCPU()))
}

// ceiling is the requests a second the row's machine CPU a request would
// allow with every core busy.
func (r *cpuRow) ceiling() float64 {
	return float64(runtime.NumCPU()) * float64(r.requests) / r.machine.Seconds()
}

// machineTime is the CPU time all the machine's processors have spent
// busy, from /proc/stat (0 where there is none): user, nice, system,
// irq, softirq and steal, in the kernel's ticks of 10 ms.
func machineTime() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} {
		v, _ := strconv.ParseInt(f[i], 10, 64)
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
