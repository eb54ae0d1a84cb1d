package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/inbox/natsinbox"
	"github.com/idemgate/idemgate/outbox"
)

// relayFlags are the relay's tuning, on the command line.
type relayFlags struct {
	lease, every      time.Duration
	conc, maxAttempts int
}

func newRelayCmd() *cobra.Command {
	var path string
	var once bool
	var f relayFlags
	cmd := &cobra.Command{
		Use:   "relay --config FILE [--once]",
		Short: "Deliver the effects Go services enqueued in their outbox, at least once, with their derived keys",
		Long: `relay runs the outbox's relay (docs/design.md, "Multi-effect operations and the outbox") on the
store of a gateway configuration: it claims the effects due for the configuration's upstreams
(an effect names its target by the upstream's name; the upstream's URL, headers and timeout
are the target's, so credentials stay in the configuration), one relay per effect at a time,
leased and fenced, and delivers each with its derived key (<tenant>:<operation key>/<name>) in
Idempotency-Key. An operation's effects go out in order, each once every earlier one
succeeded. 2xx succeeds; 3xx and 4xx fail (408, 409, 425 and 429 are tried again); unreachable is
tried again; sent without an answer, or 5xx, is unknown and sent again with the same key
after a backoff: delivery is AT LEAST ONCE, so targets must deduplicate by that key. After
--max-attempts an effect waits for an operator (idemgate effects resolve).

An effect whose target is nats:SUBJECT, for a subject listed under relay: {nats: URL, subjects: […]},
is published to JetStream with Nats-Msg-Id set to its derived key, and succeeds once the stream
acknowledges it: a publish repeated after a crash is dropped by the stream's duplicate window.

Several relays may run beside each other and beside running gateways. With --once it runs
rounds until none is due and prints what they did; without, it runs until SIGTERM or SIGINT,
finishing the deliveries in flight. Logs are JSON lines on stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.LoadRelay(path)
			if err != nil {
				return err
			}
			return runRelay(cmd, cfg, f, once)
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "a configuration file: its store and upstreams, as the gateway's (required; routes optional)")
	cmd.Flags().BoolVar(&once, "once", false, "deliver what is due, then exit")
	cmd.Flags().DurationVar(&f.lease, "lease", 0, "how long a claim is this relay's alone (default: 30s, or twice the longest upstream timeout); a delivery ends a tenth of it (1s at least) before it lapses")
	cmd.Flags().DurationVar(&f.every, "every", time.Second, "how long to wait when nothing is due")
	cmd.Flags().IntVar(&f.conc, "concurrency", 16, "deliveries at once (and the most effects one claim takes)")
	cmd.Flags().IntVar(&f.maxAttempts, "max-attempts", 10, "deliveries of one effect before it waits for an operator (-1: no bound)")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

func runRelay(cmd *cobra.Command, cfg *config.Config, f relayFlags, once bool) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	store, err := openMigrated(ctx, cfg.Store, false)
	if err != nil {
		return err
	}
	defer store.Close()
	log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
	targets, err := relayTargets(cfg)
	if err != nil {
		return err
	}
	r := &outbox.Relay{Store: store, Targets: targets, Lease: f.lease, Every: f.every, Concurrency: f.conc, MaxAttempts: f.maxAttempts, Logger: log}
	if once {
		return relayOnce(ctx, cmd, r)
	}
	names := make([]string, 0, len(r.Targets))
	for name := range r.Targets {
		names = append(names, name)
	}
	slices.Sort(names)
	log.Info("relaying", "targets", names)
	return r.Run(ctx)
}

// relayTargets are the configuration's upstreams, as the relay's
// targets, and its JetStream subjects (relay: {nats, subjects}) as
// targets nats:SUBJECT.
func relayTargets(cfg *config.Config) (map[string]outbox.Target, error) {
	out := map[string]outbox.Target{}
	for name, u := range cfg.Upstreams {
		h := http.Header{}
		for k, v := range u.Headers {
			h.Set(k, v)
		}
		out[name] = outbox.Target{URL: u.URL, Header: h, Timeout: u.Timeout}
	}
	if cfg.Relay == nil {
		return out, nil
	}
	// Connected in the background, reconnected for ever: a publish while
	// the server is away is not applied, and due again.
	nc, err := natsinbox.Connect(cfg.Relay.NATS, "idemgate relay")
	if err != nil {
		return nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	for _, subject := range cfg.Relay.Subjects {
		out[natsinbox.TargetPrefix+subject] = outbox.Target{Sender: natsinbox.Publisher{JS: js, Subject: subject}}
	}
	return out, nil
}

// relayOnce runs rounds until one claims nothing, and says what they did.
func relayOnce(ctx context.Context, cmd *cobra.Command, r *outbox.Relay) error {
	var total outbox.Round
	for {
		round, err := r.Once(ctx)
		if err != nil {
			return err
		}
		if round.Claimed == 0 {
			break
		}
		total = total.Plus(round)
	}
	_, err := fmt.Fprintf(cmd.OutOrStdout(), "delivered %d effect(s): %d succeeded, %d failed, %d not applied, "+
		"%d unknown, %d waiting for an operator, %d fenced\n", total.Claimed, total.Succeeded, total.Failed,
		total.Released, total.Unknown, total.Parked, total.Fenced)
	return err
}
