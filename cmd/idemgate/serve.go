package main

import (
	"context"
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

	"github.com/idemgate/idemgate/gateway"
)

func newServeCmd() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "serve --config FILE",
		Short: "Run the gateway: the idempotency contract in front of the configured APIs",
		Long: `serve reads the YAML configuration (see DESIGN.md), migrates the store, and serves
the configured routes, the control API under /_idem/v1, /healthz and /readyz. On
SIGTERM or SIGINT it stops accepting requests and lets those in flight finish
within shutdown_timeout; one cut off stays executing until its lease makes it
unknown. Logs are JSON lines on stderr, without bodies or tokens.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
			return serve(cmd.Context(), path, log)
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "configuration file (required)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func serve(ctx context.Context, path string, log *slog.Logger) error {
	cfg, err := gateway.LoadConfig(path)
	if err != nil {
		return err
	}
	if hold := os.Getenv("IDEMGATE_DRILL_HOLD_BEFORE_FORWARD"); hold != "" {
		if cfg.HoldBeforeForward, err = time.ParseDuration(hold); err != nil {
			return fmt.Errorf("IDEMGATE_DRILL_HOLD_BEFORE_FORWARD: %w", err)
		}
	}
	store, err := openStore(ctx, cfg.Store, false)
	if err != nil {
		return err
	}
	defer store.Close()
	if err := store.Migrate(ctx); err != nil {
		return fmt.Errorf("migrate store: %w", err)
	}
	g, err := gateway.New(cfg, store, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go g.RunBackground(ctx)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	log.Info("listening", slog.String("addr", ln.Addr().String()), slog.String("instance", cfg.Instance))
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down", slog.Duration("timeout", cfg.ShutdownTimeout))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	_ = srv.Close()
	return nil
}
