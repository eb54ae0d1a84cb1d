package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/sqlite"
	"github.com/idemgate/idemgate/tracing"
)

// The traces mode's targets (-traces): on each store, a gateway built
// without any tracing option (the code path before traces existed), one
// with tracing as an unset environment leaves it (off: nil, nothing
// wrapped), and one exporting every span to a local OTLP/HTTP receiver.
const (
	tracesNone = "no tracing wiring"
	tracesOff  = "tracing off"
	tracesOn   = "tracing on (OTLP)"
)

// runTraces measures new-key and replay throughput at each concurrency
// through the three builds on each store, in interleaved rounds, and
// prints the ratios issue 23 sets targets for: off within 3% of no
// wiring, on within 10% of off.
func runTraces(n, rounds int, concList, pgDSN string) error {
	concurrencies, err := parseConcurrencies(concList)
	if err != nil || rounds < 1 || n < rounds {
		return fmt.Errorf("-n %d -rounds %d -c %q: want n >= rounds >= 1: %v", n, rounds, concList, err)
	}
	upstream := newUpstream()
	defer upstream.Close()
	var exported atomic.Int64
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, _ := io.Copy(io.Discard, r.Body)
		exported.Add(m)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer receiver.Close()
	traces, err := tracesTo(receiver.URL)
	if err != nil {
		return err
	}
	e := &benchEnv{commits: map[string]commitProbes{}, opts: map[string][]server.Option{}, flush: map[string]func(){}}
	defer e.cleanup()
	if err := e.tracedTargets(upstream.URL, pgDSN, traces); err != nil {
		return err
	}
	results, _, err := measureAll(e, n, rounds, concurrencies)
	if err != nil {
		return err
	}
	_ = traces.Shutdown(context.Background())
	printTraces(e, results, concurrencies, exported.Load())
	return nil
}

// tracesTo is tracing as FromEnv starts it with an OTLP endpoint set.
func tracesTo(endpoint string) (*tracing.Tracing, error) {
	os.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
	defer os.Unsetenv("OTEL_EXPORTER_OTLP_ENDPOINT")
	return tracing.FromEnv(context.Background(), "bench")
}

// tracedTargets starts the three builds on SQLite, and on PostgreSQL
// unless pgDSN is empty, each on a store of its own.
func (e *benchEnv) tracedTargets(upstream, pgDSN string, traces *tracing.Tracing) error {
	dir, err := os.MkdirTemp("", "idemgate-bench-traces")
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() { os.RemoveAll(dir) })
	builds := []struct {
		name string
		opts []server.Option
	}{{tracesNone, nil}, {tracesOff, []server.Option{server.WithTracing(nil)}},
		{tracesOn, []server.Option{server.WithTracing(traces)}}}
	kinds := []string{"sqlite"}
	if pgDSN != "" {
		kinds = append(kinds, "postgres")
	}
	for _, kind := range kinds {
		for i, b := range builds {
			name := kind + " " + b.name
			st, dsn, err := e.tracedStore(kind, pgDSN, dir, i)
			if err != nil {
				return err
			}
			e.opts[name] = b.opts
			if b.name == tracesOn {
				e.flush[name] = func() { _ = traces.Flush(context.Background()) }
			}
			if err := e.gatewayOn(name, st, dsn, upstream, dir); err != nil {
				return err
			}
		}
	}
	return nil
}

// tracedStore opens the i-th build's store of a kind, closed at the end.
func (e *benchEnv) tracedStore(kind, pgDSN, dir string, i int) (migrator, string, error) {
	if kind == "sqlite" {
		path := filepath.Join(dir, fmt.Sprintf("traces-%d.db", i))
		st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
		if err != nil {
			return nil, "", err
		}
		e.closers = append(e.closers, func() { st.Close() })
		return st, "sqlite:" + path, nil
	}
	dsn, err := e.schema(pgDSN, fmt.Sprintf("bench_traces%d", i))
	if err != nil {
		return nil, "", err
	}
	st, err := postgres.Open(context.Background(), dsn, postgres.Options{})
	if err != nil {
		return nil, "", err
	}
	e.closers = append(e.closers, func() { st.Close() })
	return st, dsn, nil
}

// printTraces prints the rows and the ratios.
func printTraces(e *benchEnv, r map[row]*result, concurrencies []int, exported int64) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\twrites\tconcurrency\treq/s\tp50 ms\tp99 ms\t")
	for _, t := range e.targets {
		for _, mode := range modes {
			for _, c := range concurrencies {
				x := r[row{t.name, mode, c}]
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.3f\t%.3f\t\n", t.name, mode, c, x.rate, ms(x.p50), ms(x.p99))
			}
		}
	}
	_ = tw.Flush()
	fmt.Printf("\nthe OTLP receiver took %d KiB of spans\n", exported>>10)
	for _, store := range []string{"sqlite", "postgres"} {
		for _, mode := range modes {
			for _, c := range concurrencies {
				none, off, on := r[row{store + " " + tracesNone, mode, c}], r[row{store + " " + tracesOff, mode, c}],
					r[row{store + " " + tracesOn, mode, c}]
				if none == nil || off == nil || on == nil {
					continue
				}
				fmt.Printf("%-8s %-7s c=%-3d off/no-wiring %.3f (target >= 0.97)   on/off %.3f (target >= 0.90)\n",
					store, mode, c, off.rate/none.rate, on.rate/off.rate)
			}
		}
	}
	fmt.Printf("(measured %s)\n", time.Now().UTC().Format(time.RFC3339))
}
