package main

import (
	"context"
	"log/slog"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/cmd/internal/server"
	"github.com/idemgate/idemgate/config"
)

func newConsumeCmd() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "consume --config FILE",
		Short: "Run the configured consumers alone: each message an operation, acknowledged once final or unknown",
		Long: `consume runs the consumers of a configuration (docs/design.md, "Inbox: messages and webhooks")
without the HTTP listener: each message taken from its NATS JetStream stream or RabbitMQ queue is
an operation of the consumer's tenant, keyed by key_from, fingerprinted by its body and delivered
to its upstream through the gateway's keyed path. A message is acknowledged once its operation is
succeeded, failed or unknown; a redelivery of a final one is acknowledged without calling the
upstream; one still executing is delivered again later; a conflict, a message without identity
and one past max_deliveries are parked on the dead letter, with the reason in a header. A broker
that is down is waited for. It also runs the maintenance plane (sweeps, purge, sealer). On
SIGTERM or SIGINT it finishes the messages in hand and exits. Logs are JSON lines on stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.LoadConsumers(path)
			if err != nil {
				return err
			}
			return consume(cmd.Context(), cfg, slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil)))
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "configuration file with consumers: (required; routes optional)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func consume(ctx context.Context, cfg *config.Config, log *slog.Logger) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	store, err := openMigrated(ctx, cfg.Store, false)
	if err != nil {
		return err
	}
	defer store.Close()
	s, err := server.New(cfg, store, log)
	if err != nil {
		return err
	}
	bg, stopBackground := context.WithCancel(context.WithoutCancel(ctx))
	background := make(chan struct{})
	go func() { defer close(background); s.RunBackground(bg) }()
	s.RunConsumers(ctx)
	stopBackground()
	<-background
	return nil
}
