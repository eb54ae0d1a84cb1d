package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/tracing"
)

func newServeCmd() *cobra.Command {
	var path, pidFile string
	cmd := &cobra.Command{
		Use:   "serve --config FILE [--pid-file FILE]",
		Short: "Run the gateway: the idempotency contract in front of the configured APIs",
		Long: `serve reads the YAML configuration (see docs/design.md), migrates the store, and serves
the configured routes, the control API under /_idem/v1, /healthz and /readyz. On
SIGTERM or SIGINT it stops accepting requests and lets those in flight finish
within shutdown_timeout; one cut off stays executing until its lease makes it
unknown. On SIGHUP (or idemgate reload) it re-reads the file: routes, actions,
principals, limits and upstreams change for new requests, those in flight finish
under the old; an invalid file, or one that changes a setting bound at start-up
(store, listen, metrics_listen, …), keeps the running configuration and logs why.
--pid-file writes the process id where idemgate reload finds it. Logs are JSON
lines on stderr, without bodies or tokens.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			return serve(cmd.Context(), path, pidFile, log)
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "configuration file (required)")
	cmd.Flags().StringVar(&pidFile, "pid-file", "", "write the process id here while serving (for idemgate reload)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func serve(ctx context.Context, path, pidFile string, log *slog.Logger) error {
	cfg, err := config.Load(path)
	if err != nil {
		return err
	}
	if hold := os.Getenv("IDEMGATE_DRILL_HOLD_BEFORE_FORWARD"); hold != "" {
		if cfg.HoldBeforeForward, err = time.ParseDuration(hold); err != nil {
			return fmt.Errorf("IDEMGATE_DRILL_HOLD_BEFORE_FORWARD: %w", err)
		}
		log.Warn("drill setting: every write is held before it is forwarded; never in production",
			slog.Duration("hold", cfg.HoldBeforeForward))
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// SIGHUP is caught before the pid file names this process: a reload
	// asked for while it starts waits for it, and never ends it.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	if pidFile != "" {
		if err := writePidFile(pidFile); err != nil {
			return err
		}
		defer removePidFile(pidFile)
	}
	traces, err := tracing.FromEnv(ctx, buildVersion())
	if err != nil {
		return fmt.Errorf("traces: %w", err)
	}
	if traces != nil {
		log.Info("exporting traces over OTLP, as the OTEL_* variables say")
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			if err := traces.Shutdown(sctx); err != nil {
				log.Warn("traces: the last spans were not exported", slog.String("error", err.Error()))
			}
		}()
	}
	gs, err := listenGateway(ctx, cfg, log, server.WithTracing(traces))
	if err != nil {
		return err
	}
	log.Info("listening", slog.String("addr", gs.addr()), slog.String("instance", cfg.Instance),
		slog.Bool("tls", cfg.TLS != nil))
	if gs.metricsLn != nil {
		log.Info("serving metrics", slog.String("addr", gs.metricsLn.Addr().String()))
	}
	go reloadOnHangup(ctx, hup, gs.s, log)
	return gs.run(ctx)
}

// gatewayServer is a server (cmd/internal/server: the gateway and the
// planes beside it) on its migrated store, listening.
type gatewayServer struct {
	cfg   *config.Config
	store migratingStore
	s     *server.Server
	ln    net.Listener
	// metricsLn serves /metrics when metrics_listen is set.
	metricsLn net.Listener
	log       *slog.Logger
}

// listenGateway opens and migrates the store and binds the listener.
func listenGateway(ctx context.Context, cfg *config.Config, log *slog.Logger, opts ...server.Option) (*gatewayServer, error) {
	store, err := openStore(ctx, cfg.Store, false)
	if err != nil {
		return nil, err
	}
	gs := &gatewayServer{cfg: cfg, store: store, log: log}
	if err := store.Migrate(ctx); err != nil {
		store.Close()
		return nil, fmt.Errorf("migrate store: %w", err)
	}
	if gs.s, err = server.New(cfg, store, log, opts...); err == nil {
		gs.ln, err = net.Listen("tcp", cfg.Listen)
	}
	if err == nil && cfg.MetricsListen != "" {
		if gs.metricsLn, err = net.Listen("tcp", cfg.MetricsListen); err != nil {
			gs.ln.Close()
		}
	}
	if err != nil {
		store.Close()
		return nil, err
	}
	return gs, nil
}

func (gs *gatewayServer) addr() string { return gs.ln.Addr().String() }

// run serves until ctx ends, then ends the MCP clients' event streams and
// lets requests in flight finish within shutdown_timeout, then stops the background work (its jobs, then the
// audit batcher's flush, then the final seal), and closes the store.
func (gs *gatewayServer) run(ctx context.Context) error {
	defer gs.store.Close()
	srv := gs.s.HTTPServer()
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	background := make(chan struct{})
	go func() { defer close(background); gs.s.RunBackground(bg) }()
	defer func() { stopBackground(); <-background; gs.s.Close() }()
	defer gs.consumers(ctx)() // stopped first: they finish what they hold while the store is open
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(gs.ln) }()
	if gs.metricsLn != nil {
		msrv := &http.Server{Handler: gs.s.Metrics().Handler(), ReadHeaderTimeout: 10 * time.Second}
		ln := gs.metricsLn
		if tc := gs.cfg.MetricsListenerTLS(); tc != nil {
			ln = tls.NewListener(ln, tc) // metrics_tls, or the listener's tls
		}
		go func() { errc <- msrv.Serve(ln) }()
		defer msrv.Close()
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	gs.log.Info("shutting down", slog.Duration("timeout", gs.cfg.ShutdownTimeout))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), gs.cfg.ShutdownTimeout)
	defer cancel()
	gs.s.EndMCPStreams() // an idle MCP client's event stream never ends on its own
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	_ = srv.Close()
	return nil // the deferred stop: the background work, then the store
}

// consumers runs the configured consumers beside the listener; the
// function it returns stops them and waits for their messages in hand.
func (gs *gatewayServer) consumers(ctx context.Context) (stop func()) {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() { defer close(done); gs.s.RunConsumers(cctx) }()
	return func() { cancel(); <-done }
}
