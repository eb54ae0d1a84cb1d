package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/store/postgres"
)

// maxGateways is how many gateways -scale runs on one PostgreSQL.
const maxGateways = 3

// scaleRow is one row of -scale: its rounds, and what the machine and
// the server did meanwhile.
type scaleRow struct {
	result
	machine, cpu time.Duration // the machine's busy CPU time, and this process's
	span         time.Duration // the wall time they were counted over (a replay round's set-up too)
	commits      int64         // the server's transactions committed (all its databases' clients)
	walSyncs     int64         // the server's WAL flushes
	walBytes     int64         // the WAL the server wrote
	backends     time.Duration // the CPU time of the gateways' server backends
}

// scaleApp names the gateways' connections, to find their backends.
const scaleApp = "idemgate-bench-scale"

// runScale measures 1, 2 and 3 gateways, each its own process's worth of
// server (its own store, pool and batcher) on one PostgreSQL schema, the
// load spread over them, new keys and replays at each concurrency, in
// interleaved rounds; and prints, per row, throughput, latency, the CPU
// the machine spent and the commits and WAL flushes the server made per
// request.
func runScale(n, rounds int, concList, base string, w io.Writer) error {
	concurrencies, err := parseConcurrencies(concList)
	if err != nil || rounds < 1 || n < rounds || base == "" {
		return fmt.Errorf("-scale -n %d -rounds %d -c %q -postgres %q: want n >= rounds >= 1, a server: %v", n, rounds,
			concList, base, err)
	}
	upstream := newUpstream()
	defer upstream.Close()
	e := &benchEnv{}
	defer e.cleanup()
	dir, err := os.MkdirTemp("", "idemgate-scale")
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() { os.RemoveAll(dir) })
	dsn, err := e.schema(base, "bench_scale")
	if err != nil {
		return err
	}
	dsn += "&application_name=" + scaleApp // its backends, whose CPU is counted
	var urls []string
	for i := range maxGateways {
		s, err := postgres.Open(context.Background(), dsn, postgres.Options{})
		if err != nil {
			return err
		}
		e.closers = append(e.closers, func() { s.Close() })
		if err := s.Migrate(context.Background()); err != nil {
			return err
		}
		u, err := e.serveGateway(fmt.Sprintf("gateway %d", i+1), s, dsn, upstream.URL, dir, "", "")
		if err != nil {
			return err
		}
		urls = append(urls, u)
	}
	var targets []target
	for k := 1; k <= maxGateways; k++ {
		targets = append(targets, target{name: fmt.Sprintf("%d gateway(s)", k), url: urls[0], urls: urls[:k]})
	}
	stats, err := pgx.Connect(context.Background(), base)
	if err != nil {
		return err
	}
	defer stats.Close(context.Background())
	rows, err := scaleRounds(targets, stats, n, rounds, concurrencies)
	if err != nil {
		return err
	}
	if err := printScale(w, targets, rows, concurrencies); err != nil {
		return err
	}
	return printKept(w, stats, dsn)
}

// printKept prints what the run's operations keep on the server: rows
// and bytes (tables, their indexes and TOAST) per operation.
func printKept(w io.Writer, stats *pgx.Conn, dsn string) error {
	u, err := url.Parse(dsn)
	if err != nil {
		return err
	}
	schema := u.Query().Get("search_path")
	ctx := context.Background()
	var ops int64
	if err := stats.QueryRow(ctx, "SELECT count(*) FROM "+schema+".idem_operations").Scan(&ops); err != nil || ops == 0 {
		return err
	}
	fmt.Fprintf(w, "kept, per operation (%d operations):", ops)
	for _, table := range []string{"idem_operations", "idem_audit_events"} {
		var rows, size int64
		if err := stats.QueryRow(ctx, "SELECT count(*), pg_total_relation_size($1) FROM "+schema+"."+table,
			schema+"."+table).Scan(&rows, &size); err != nil {
			return err
		}
		fmt.Fprintf(w, " %s %.2f rows, %.0f bytes;", table, float64(rows)/float64(ops), float64(size)/float64(ops))
	}
	_, err = fmt.Fprintln(w)
	return err
}

// scaleRounds measures every target in every mode and concurrency, the
// targets in turn within a round, the order rotating.
func scaleRounds(targets []target, stats *pgx.Conn, n, rounds int, concurrencies []int) (map[row]*scaleRow, error) {
	for _, t := range targets { // warm-up: connections, prepared statements, caches
		if _, err := measureOnce(t, "new-key", max(n/5, 64), slices.Max(concurrencies)); err != nil {
			return nil, err
		}
	}
	out := map[row]*scaleRow{}
	for _, mode := range modes {
		for _, c := range concurrencies {
			for r := range rounds {
				for i := range targets {
					t := targets[(i+r)%len(targets)]
					key := row{t.name, mode, c}
					if out[key] == nil {
						out[key] = &scaleRow{}
					}
					if err := out[key].measure(t, mode, n/rounds, c, stats); err != nil {
						return nil, fmt.Errorf("%s %s c=%d: %w", t.name, mode, c, err)
					}
				}
			}
		}
	}
	return out, nil
}

// measure adds one round to the row, with the CPU and the server's
// commits it took.
func (s *scaleRow) measure(t target, mode string, n, c int, stats *pgx.Conn) error {
	commits0, syncs0, bytes0, err := serverCounts(stats)
	if err != nil {
		return err
	}
	backends0, err := backendsCPU(stats)
	if err != nil {
		return err
	}
	cpu0, machine0, t0 := cpuTime(), machineTime(), time.Now()
	rd, err := measureOnce(t, mode, n, c)
	if err != nil {
		return err
	}
	s.span += time.Since(t0)
	s.cpu += cpuTime() - cpu0
	s.machine += machineTime() - machine0
	commits1, syncs1, bytes1, err := serverCounts(stats)
	if err != nil {
		return err
	}
	s.commits += commits1 - commits0
	s.walSyncs += syncs1 - syncs0
	s.walBytes += bytes1 - bytes0
	backends1, err := backendsCPU(stats)
	if err != nil {
		return err
	}
	s.backends += backends1 - backends0
	s.add(rd)
	return nil
}

// backendsCPU is the CPU time the gateways' server backends have spent,
// from /proc (the server runs on this machine); a backend that closed
// meanwhile drops out, which the pools, kept full, make rare.
func backendsCPU(conn *pgx.Conn) (time.Duration, error) {
	rows, err := conn.Query(context.Background(), "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
		scaleApp)
	if err != nil {
		return 0, err
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// After the command's closing parenthesis: fields 14 and 15
		// (utime, stime) are the 12th and 13th.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			total += time.Duration(u+s) * 10 * time.Millisecond
		}
	}
	return total, nil
}

// serverCounts are the server's committed transactions, WAL flushes and
// WAL bytes so far (pg_stat_database and pg_stat_wal: the whole server's,
// since others share it).
func serverCounts(conn *pgx.Conn) (commits, syncs, walBytes int64, err error) {
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "SELECT pg_stat_clear_snapshot()"); err != nil {
		return 0, 0, 0, err
	}
	err = conn.QueryRow(ctx, `SELECT (SELECT sum(xact_commit)::bigint FROM pg_stat_database),
		(SELECT wal_sync FROM pg_stat_wal), (SELECT wal_bytes::bigint FROM pg_stat_wal)`).Scan(&commits, &syncs, &walBytes)
	return commits, syncs, walBytes, err
}

func printScale(w io.Writer, targets []target, rows map[row]*scaleRow, concurrencies []int) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "gateways\twrites\tc\treq/s\tp50 ms\tp99 ms\tmachine CPU %\tCPU µs/req (all)\tthis process µs/req\tits server backends µs/req\t"+
		"server commits/req\tWAL flushes/req\tWAL bytes/req\t")
	for _, mode := range modes {
		for _, c := range concurrencies {
			for _, t := range targets {
				r := rows[row{t.name, mode, c}]
				reqs := float64(r.count())
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.3f\t%.3f\t%.0f\t%.0f\t%.0f\t%.0f\t%.2f\t%.2f\t%.0f\t\n", t.name, mode, c, r.rate,
					ms(r.p50), ms(r.p99), 100*r.machine.Seconds()/r.span.Seconds()/float64(runtime.NumCPU()),
					float64(r.machine.Microseconds())/reqs, float64(r.cpu.Microseconds())/reqs, float64(r.backends.Microseconds())/reqs,
					float64(r.commits)/reqs, float64(r.walSyncs)/reqs, float64(r.walBytes)/reqs)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "commits and WAL flushes are the whole server's: its other clients count too; "+
		"the gateways and the load generator are this process")
	return err
}

// count is how many requests the row's rounds made.
func (r *result) count() int {
	n := 0
	for _, x := range r.rounds {
		n += len(x.lat)
	}
	return n
}
