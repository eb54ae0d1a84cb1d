// Command bench measures, side by side in one run, one trivial upstream
// reached through:
//
//	(a) direct calls;
//	(b) a plain tuned httputil.ReverseProxy;
//	(c) idemgate on SQLite, and (e) its raw floor: the same job by hand on
//	    SQLite, two commits that wait for the disk (bench/floor.go);
//	(d) idemgate on PostgreSQL, and (f) its raw floor on PostgreSQL;
//
// for new-key writes and for replays, at each concurrency, and prints
// throughput, p50 and p99, the median latency of one durable commit on
// each store, and the checks of the hardening issue with their ratios.
//
//	go run ./bench [-n 5000] [-c 1,32] [-postgres DSN | -postgres=]
//
// Everything runs in this process on loopback, so every variant shares the
// same cores with the load generator: compare rows, not absolute numbers.
// Each row is measured after a warm-up of a fifth as many requests.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	n := flag.Int("n", 5000, "requests per measurement")
	conc := flag.String("c", "1,32", "concurrencies")
	pg := flag.String("postgres", envOr("IDEMGATE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		"PostgreSQL server for (d) and (f); empty to skip them")
	flag.Parse()
	if err := run(*n, *conc, *pg); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// row names one measurement.
type row struct {
	target string
	mode   string
	c      int
}

func run(n int, concList, pgDSN string) error {
	concurrencies, err := parseConcurrencies(concList)
	if err != nil {
		return err
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":"T-1","status":"open"}`))
	}))
	defer upstream.Close()
	env, err := setup(upstream.URL, pgDSN)
	defer env.cleanup()
	if err != nil {
		return err
	}
	results := map[row]result{}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\twrites\tconcurrency\treq/s\tp50 ms\tp99 ms\t")
	for _, t := range env.targets {
		for _, mode := range []string{"new-key", "replay"} {
			for _, c := range concurrencies {
				r, err := measure(t, mode, n, c)
				if err != nil {
					return fmt.Errorf("%s %s c=%d: %w", t.name, mode, c, err)
				}
				results[row{t.name, mode, c}] = r
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.3f\t%.3f\t\n", t.name, mode, c, r.rate, ms(r.p50), ms(r.p99))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	report(os.Stdout, env, results, concurrencies)
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
