package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/internal/opsapi"
)

func newOpsAPICmd() *cobra.Command {
	var (
		listen string
		opts   opsapi.Options
	)
	cmd := &cobra.Command{
		Use:   "opsapi --listen ADDR [--naive] [--faults]",
		Short: "Run the reference ops API (tickets, payments, deployments) the drills and the demo use",
		Long: `opsapi serves a small operations API stored in SQLite. By default it is itself
idempotent (httpidem, with each business write and its completion in one
transaction). --naive ignores keys and business identities, like most legacy
APIs; --faults accepts POST /_faults to inject lost answers, delays, failures,
statuses and writes held in flight until released. GET /v1/effects counts every effect performed.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runOpsAPI(cmd.Context(), listen, opts, slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil)))
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:9090", "address to listen on")
	f.StringVar(&opts.Path, "db", "opsapi.db", "SQLite file")
	f.BoolVar(&opts.Naive, "naive", false, "ignore Idempotency-Key and business identities")
	f.BoolVar(&opts.Faults, "faults", false, "accept POST /_faults")
	f.DurationVar(&opts.DeployDuration, "deploy-duration", 2*time.Second, "how long a simulated rollout takes")
	f.DurationVar(&opts.Lease, "lease", 0, "each write's lease in default mode (0: httpidem's default)")
	return cmd
}

func runOpsAPI(ctx context.Context, listen string, opts opsapi.Options, log *slog.Logger) error {
	s, err := opsapi.New(ctx, opts)
	if err != nil {
		return err
	}
	defer s.Close()
	h, err := s.Handler()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	log.Info("listening", slog.String("addr", ln.Addr().String()), slog.Bool("naive", opts.Naive),
		slog.Bool("faults", opts.Faults))
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
