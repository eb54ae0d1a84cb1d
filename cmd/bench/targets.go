package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/store/postgres"
	"github.com/idemgate/idemgate/store/sqlite"
)

const token = "bench-token"

// pgBatches is the PostgreSQL gateway's batches in flight (-batches; 0:
// the store's default).
var pgBatches int

// The targets' names, as the table and the checks use them.
const (
	direct      = "(a) direct"
	proxy       = "(b) reverse proxy"
	gwSQLite    = "(c) idemgate sqlite"
	gwPostgres  = "(d) idemgate postgres"
	floorSQLite = "(e) floor sqlite"
	floorPG     = "(f) floor postgres"
	// The gateways again, with the audit log on: the sealer running and
	// the events that are no transition recorded.
	auditSQLite   = "(g) idemgate sqlite +audit"
	auditPostgres = "(h) idemgate postgres +audit"
	// The SQLite gateway without its requests observed by the metrics.
	unobservedSQLite = "(i) idemgate sqlite -metrics"
)

// audited pairs each gateway with the same build with the audit log on.
var audited = map[string]string{gwSQLite: auditSQLite, gwPostgres: auditPostgres}

// target is one way to reach the upstream; action is set on the gateways
// whose action effects are measured too (actions.go).
type target struct {
	name   string
	url    string
	action bool
	token  string // the bearer token its writes send: the bench principal's by default
	// urls, if set, are several gateways on one store, the load spread
	// over them (-scale): each worker sends to one, url is the first.
	urls []string
	// flush, if set, ends each of the target's rounds, within its time:
	// the traced gateway exports its round's spans then, so that their
	// cost is its own and not spread over the next target's round.
	flush func()
}

// bearer is the token the target's writes send.
func (t target) bearer() string {
	if t.token != "" {
		return t.token
	}
	return token
}

// benchEnv is every target, and the commit probes of each store, on the
// disk and server the targets use.
type benchEnv struct {
	targets []target
	commits map[string]commitProbes // by gateway target name
	logs    map[string]ledger.Store // the audited targets' stores
	// gwStores are the gateway targets' stores, by name, and groupCommits
	// their rows' group commits.
	gwStores     map[string]ledger.Store
	groupCommits map[row]*groupCommits
	// tallies count the store calls of the gateways with action rows, by
	// target name, and calls the rows' (-calls; nil without it).
	tallies map[string]*callTally
	calls   map[row]*callRow
	// cpu is each row's CPU, this process's and the machine's.
	cpu     map[row]*cpuRow
	closers []func()
	// opts are the server options of a gateway target, and flush its
	// rounds' end, by name (-traces).
	opts  map[string][]server.Option
	flush map[string]func()
}

func (e *benchEnv) cleanup() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
}

func (e *benchEnv) serve(name string, h http.Handler) {
	srv := httptest.NewServer(h)
	e.closers = append(e.closers, srv.Close)
	e.targets = append(e.targets, target{name: name, url: srv.URL})
}

// setup starts the proxy, the gateways and the floors in front of upstream,
// SQLite ones in one temporary directory; PostgreSQL ones each in a schema
// of their own, dropped at the end.
func setup(upstream, pgDSN string, counting, jwt bool) (*benchEnv, error) {
	e := &benchEnv{targets: []target{{name: direct, url: upstream}}, commits: map[string]commitProbes{}, logs: map[string]ledger.Store{},
		gwStores: map[string]ledger.Store{}, groupCommits: map[row]*groupCommits{}, cpu: map[row]*cpuRow{}}
	if counting {
		e.tallies, e.calls = map[string]*callTally{}, map[row]*callRow{}
	}
	u, _ := url.Parse(upstream)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second}
	e.serve(proxy, rp)
	dir, err := os.MkdirTemp("", "idemgate-bench")
	if err != nil {
		return e, err
	}
	e.closers = append(e.closers, func() { os.RemoveAll(dir) })
	if err := e.sqlite(dir, upstream); err != nil {
		return e, err
	}
	if jwt {
		if err := e.jwtPair(dir, upstream); err != nil {
			return e, err
		}
	}
	if pgDSN == "" {
		return e, nil
	}
	return e, e.postgres(pgDSN, upstream, dir)
}

func (e *benchEnv) sqlite(dir, upstream string) error {
	path := filepath.Join(dir, "bench.db")
	sq, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() { sq.Close() })
	// The audited twin is made first. In one process, identical gateways
	// have measured apart by up to 15% with the order they were made in
	// (the -metrics twin shows it): read its ratios with that spread, as
	// README.md reports them, from both orders.
	auditPath := filepath.Join(dir, "bench-audit.db")
	sa, err := sqlite.Open(context.Background(), auditPath, sqlite.Options{})
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() { sa.Close() })
	if err := e.gatewayOn(auditSQLite, sa, "sqlite:"+auditPath, upstream, dir); err != nil {
		return err
	}
	if err := e.gatewayOn(gwSQLite, sq, "sqlite:"+path, upstream, dir); err != nil {
		return err
	}
	plainPath := filepath.Join(dir, "bench-unobserved.db")
	su, err := sqlite.Open(context.Background(), plainPath, sqlite.Options{})
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() { su.Close() })
	if err := e.gatewayOn(unobservedSQLite, su, "sqlite:"+plainPath, upstream, dir); err != nil {
		return err
	}
	f, err := openSQLiteFloor(filepath.Join(dir, "floor.db"))
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() { f.db.Close() })
	e.serve(floorSQLite, &floorProxy{store: f, upstream: upstream, client: floorClient()})
	raw, closeRaw, err := sqliteCommit(dir)
	if err != nil {
		return err
	}
	e.closers = append(e.closers, closeRaw)
	e.commits[gwSQLite] = commitProbes{raw: raw, step: stepCommit(sq)}
	return nil
}

func (e *benchEnv) postgres(base, upstream, dir string) error {
	ctx := context.Background()
	dsn, err := e.schema(base, "bench")
	if err != nil {
		return err
	}
	pgStore, err := postgres.Open(ctx, dsn, postgres.Options{Batches: pgBatches})
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() { pgStore.Close() })
	auditDSN, err := e.schema(base, "bench_audit") // the twin first, as for SQLite
	if err != nil {
		return err
	}
	pa, err := postgres.Open(ctx, auditDSN, postgres.Options{})
	if err != nil {
		return err
	}
	e.closers = append(e.closers, func() { pa.Close() })
	if err := e.gatewayOn(auditPostgres, pa, auditDSN, upstream, dir); err != nil {
		return err
	}
	if err := e.gatewayOn(gwPostgres, pgStore, dsn, upstream, dir); err != nil {
		return err
	}
	floorDSN, err := e.schema(base, "bench_floor")
	if err != nil {
		return err
	}
	f, err := openPostgresFloor(ctx, floorDSN)
	if err != nil {
		return err
	}
	e.closers = append(e.closers, f.pool.Close)
	e.serve(floorPG, &floorProxy{store: f, upstream: upstream, client: floorClient()})
	raw, err := postgresCommit(ctx, f.pool)
	if err != nil {
		return err
	}
	e.commits[gwPostgres] = commitProbes{raw: raw, step: stepCommit(pgStore)}
	return nil
}

// schema makes a fresh schema, dropped at the end, and returns a DSN that
// selects it, with a pool of 32 connections.
func (e *benchEnv) schema(base, prefix string) (string, error) {
	ctx := context.Background()
	name := fmt.Sprintf("%s_%d", prefix, time.Now().UnixNano())
	conn, err := pgx.Connect(ctx, base)
	if err != nil {
		return "", fmt.Errorf("postgres (pass -postgres= to skip): %w", err)
	}
	e.closers = append(e.closers, func() {
		_, _ = conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
		conn.Close(ctx)
	})
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", err
	}
	u, _ := url.Parse(base)
	q := u.Query()
	q.Set("search_path", name)
	q.Set("pool_max_conns", "32")
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func floorClient() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 256, MaxIdleConnsPerHost: 256,
		IdleConnTimeout: 90 * time.Second}}
}

type migrator interface {
	ledger.Store
	Migrate(context.Context) error
}

// gatewayOn is a gateway on store, unlimited (the bench measures the
// contract, not the limiter refusing it), served as serve serves it, its
// background work (sweeps, and the sealer when audited) running.
func (e *benchEnv) gatewayOn(name string, store migrator, dsn, upstream, dir string) error {
	if err := store.Migrate(context.Background()); err != nil {
		return err
	}
	section, err := auditSection(name, dir)
	if err != nil {
		return err
	}
	if section != "" {
		e.logs[name] = store
	}
	e.gwStores[name] = store
	_, err = e.serveGateway(name, store, dsn, upstream, dir, "", section)
	return err
}

// serveGateway writes the bench configuration (with more principals, and
// extra settings), serves its gateway on store, its background work
// running, and adds it as the target name; it returns its URL.
func (e *benchEnv) serveGateway(name string, store ledger.Store, dsn, upstream, dir, principals, extra string) (string,
	error) {
	cfgText := fmt.Sprintf(`store: %q
upstreams:
  app: {url: %q, max_conns: 256}
principals:
  - {name: bench, tenant: bench, token_sha256: %s}
%slimits:
  default: {rate: "0", max_live: 0, max_stored: 0}
routes:
  - {match: POST /v1/tickets, upstream: app}
actions:
  - {name: %s}
%s`, dsn, upstream, staticSum(token), principals, benchAction, extra)
	path := filepath.Join(dir, fmt.Sprintf("gw-%d.yaml", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(cfgText), 0o600); err != nil {
		return "", err
	}
	cfg, err := config.Load(path)
	if err != nil {
		return "", err
	}
	cfg.Unobserved = name == unobservedSQLite
	hasActions := name == gwSQLite || name == gwPostgres
	served := store
	if hasActions && e.tallies != nil {
		e.tallies[name] = &callTally{}
		served = countedStore{store, e.tallies[name]}
	}
	s, err := server.New(cfg, served, nil, e.opts[name]...)
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := s.HTTPServer()
	ctx, stop := context.WithCancel(context.Background())
	background := make(chan struct{})
	go func() { defer close(background); s.RunBackground(ctx) }()
	go func() { _ = srv.Serve(ln) }()
	e.closers = append(e.closers, func() { _ = srv.Close(); stop(); <-background })
	url := "http://" + ln.Addr().String()
	e.targets = append(e.targets, target{name: name, url: url, action: hasActions, flush: e.flush[name]})
	return url, nil
}

// auditSection is the audit section of an audited target: a new key, and
// checkpoints as production would sign them.
func auditSection(name, dir string) (string, error) {
	if name != auditSQLite && name != auditPostgres {
		return "", nil
	}
	key := filepath.Join(dir, fmt.Sprintf("audit-%d.key", time.Now().UnixNano()))
	if _, err := audit.Keygen(key, "bench"); err != nil {
		return "", err
	}
	return fmt.Sprintf("audit: {signing_key: %q, checkpoint_interval: 1s, checkpoints_file: %q}\n", key,
		key+".checkpoints"), nil
}
