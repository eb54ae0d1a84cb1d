// Command bench measures one trivial upstream, side by side in one run,
// through: (a) direct calls, (b) a plain tuned httputil.ReverseProxy,
// (c) idemgate on SQLite, (d) idemgate on PostgreSQL; for new-key writes and
// for replays, at each concurrency; and prints throughput, p50 and p99.
//
//	go run ./bench [-n 2000] [-c 1,32] [-postgres DSN | -postgres=]
//
// Everything runs in this process on loopback, so every variant shares the
// same cores with the load generator: compare rows, not absolute numbers.
// Each row is measured after a warm-up of a fifth as many requests.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/sqlite"
)

func main() {
	n := flag.Int("n", 2000, "requests per measurement")
	conc := flag.String("c", "1,32", "concurrencies")
	pg := flag.String("postgres", envOr("IDEMGATE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"),
		"PostgreSQL server for variant (d); empty to skip it")
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

const token = "bench-token"

// target is one way to reach the upstream.
type target struct {
	name string
	url  string
}

func run(n int, concList, pgDSN string) error {
	var concurrencies []int
	for _, c := range strings.Split(concList, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || v <= 0 {
			return fmt.Errorf("-c %q", concList)
		}
		concurrencies = append(concurrencies, v)
	}
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = w.Write([]byte(`{"id":"T-1","status":"open"}`))
	}))
	defer upstream.Close()
	targets, cleanup, err := setup(upstream.URL, pgDSN)
	defer cleanup()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\twrites\tconcurrency\treq/s\tp50 ms\tp99 ms\t")
	for _, t := range targets {
		for _, mode := range []string{"new-key", "replay"} {
			for _, c := range concurrencies {
				r, err := measure(t, mode, n, c)
				if err != nil {
					return fmt.Errorf("%s %s c=%d: %w", t.name, mode, c, err)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%.0f\t%.3f\t%.3f\t\n", t.name, mode, c, r.rate, ms(r.p50), ms(r.p99))
			}
		}
	}
	return tw.Flush()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// setup starts the proxy and the gateways in front of upstream.
func setup(upstream, pgDSN string) ([]target, func(), error) {
	var closers []func()
	cleanup := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	u, _ := url.Parse(upstream)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
	proxy := httptest.NewServer(rp)
	closers = append(closers, proxy.Close)
	targets := []target{{"(a) direct", upstream}, {"(b) reverse proxy", proxy.URL}}

	dir, err := os.MkdirTemp("", "idemgate-bench")
	if err != nil {
		return nil, cleanup, err
	}
	closers = append(closers, func() { os.RemoveAll(dir) })
	sq, err := sqlite.Open(context.Background(), filepath.Join(dir, "bench.db"), sqlite.Options{})
	if err != nil {
		return nil, cleanup, err
	}
	closers = append(closers, func() { sq.Close() })
	gw, err := startGateway(sq, "sqlite:"+filepath.Join(dir, "bench.db"), upstream, dir)
	if err != nil {
		return nil, cleanup, err
	}
	closers = append(closers, gw.Close)
	targets = append(targets, target{"(c) idemgate sqlite", gw.URL})
	if pgDSN == "" {
		return targets, cleanup, nil
	}
	pgStore, dsn, dropSchema, err := openPostgres(pgDSN)
	if err != nil {
		return nil, cleanup, err
	}
	closers = append(closers, dropSchema, func() { pgStore.Close() })
	gw, err = startGateway(pgStore, dsn, upstream, dir)
	if err != nil {
		return nil, cleanup, err
	}
	closers = append(closers, gw.Close)
	return append(targets, target{"(d) idemgate postgres", gw.URL}), cleanup, nil
}

type migrator interface {
	ledger.Store
	Migrate(context.Context) error
}

func startGateway(store migrator, dsn, upstream, dir string) (*httptest.Server, error) {
	if err := store.Migrate(context.Background()); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(token))
	cfgText := fmt.Sprintf(`store: %q
upstreams:
  app: {url: %q, max_conns: 256}
principals:
  - {name: bench, tenant: bench, token_sha256: %s}
routes:
  - {match: POST /v1/tickets, upstream: app}
`, dsn, upstream, hex.EncodeToString(sum[:]))
	path := filepath.Join(dir, fmt.Sprintf("gw-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(cfgText), 0o600); err != nil {
		return nil, err
	}
	cfg, err := gateway.LoadConfig(path)
	if err != nil {
		return nil, err
	}
	g, err := gateway.New(cfg, store, nil)
	if err != nil {
		return nil, err
	}
	return httptest.NewServer(g.Handler()), nil
}

// openPostgres opens a store on a fresh schema, dropped at the end.
func openPostgres(base string) (*postgres.Store, string, func(), error) {
	ctx := context.Background()
	schema := fmt.Sprintf("bench_%d", time.Now().UnixNano())
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return nil, "", func() {}, fmt.Errorf("postgres (pass -postgres= to skip): %w", err)
	}
	drop := func() {
		_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		conn.Close(ctx)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		return nil, "", drop, err
	}
	u, _ := url.Parse(base)
	q := u.Query()
	q.Set("search_path", schema)
	q.Set("pool_max_conns", "32")
	u.RawQuery = q.Encode()
	s, err := postgres.Open(ctx, u.String(), postgres.Options{})
	return s, u.String(), drop, err
}

type result struct {
	rate     float64
	p50, p99 time.Duration
}

var keySeq atomic.Int64

// measure warms the target up (connections, prepared statements, caches)
// with a fifth as many requests, then sends n requests from c workers.
func measure(t target, mode string, n, c int) (result, error) {
	if _, err := measureOnce(t, mode, max(n/5, c), c); err != nil {
		return result{}, err
	}
	return measureOnce(t, mode, n, c)
}

// measureOnce sends n requests from c workers. Replays first create the
// keys they will cycle through, outside the measurement.
func measureOnce(t target, mode string, n, c int) (result, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConns: c * 2, MaxIdleConnsPerHost: c * 2}}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench-%d", keySeq.Add(1))
		if mode == "replay" {
			if err := send(client, t.url, keys[i]); err != nil {
				return result{}, err
			}
		}
	}
	var next atomic.Int64
	lat := make([]time.Duration, n)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	start := time.Now()
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				key := keys[i%len(keys)]
				if mode == "new-key" {
					key = fmt.Sprintf("bench-%d", keySeq.Add(1))
				}
				t0 := time.Now()
				if err := send(client, t.url, key); err != nil {
					firstErr.CompareAndSwap(nil, err)
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return result{}, err
	}
	elapsed := time.Since(start)
	slices.Sort(lat)
	return result{rate: float64(n) / elapsed.Seconds(), p50: lat[n/2], p99: lat[n*99/100]}, nil
}

func send(client *http.Client, base, key string) error {
	req, _ := http.NewRequest("POST", base+"/v1/tickets", strings.NewReader(`{"title":"bench","priority":2}`))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
