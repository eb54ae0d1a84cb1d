package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/config"
	"github.com/idemgate/idemgate/gateway"
	"github.com/idemgate/idemgate/ledger"
	"github.com/idemgate/idemgate/maintain"
)

func newReconcileCmd() *cobra.Command {
	var path string
	var once bool
	cmd := &cobra.Command{
		Use:   "reconcile --config FILE --once",
		Short: "Probe the unknown operations of the routes that declare a probe, once, from a shell",
		Long: `reconcile runs the reconciler that every serve instance runs (docs/design.md,
"Reconciliation"): it claims the unknown operations whose probe is due, one owner per
operation at a time (so it is safe beside running gateways), sends each its probe with the
upstream's credentials, and records the verdict with its evidence: applied → succeeded, the
probe's answer replayed (Idempotency-Reconciled: true); not applied → prepared, the next
retry runs it; anything else stays unknown, probed again later, until give_up_after.
It first expires lapsed leases (an operation whose owner died becomes unknown, and so is
probed), and, when the configuration keeps an audit log, seals the events it recorded.
It purges nothing. It prints how many it settled; logs are JSON lines on stderr.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !once {
				return errors.New("pass --once (serve runs the reconciler continuously)")
			}
			cfg, err := config.Load(path)
			if err != nil {
				return err
			}
			return reconcileOnce(cmd, cfg)
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the gateway's configuration file (required)")
	cmd.Flags().BoolVar(&once, "once", false, "one pass over the operations due, then exit")
	_ = cmd.MarkFlagRequired("config")
	return cmd
}

// reconcileOnce runs the maintenance plane once, without its purge: the
// lease sweep first (an operation whose owner died is unknown, and so
// probed), then the configuration's reconciler until no probe is due, then
// the audit batcher's flush and a seal of what was recorded, when the
// configuration keeps an audit log. It builds no gateway.
func reconcileOnce(cmd *cobra.Command, cfg *config.Config) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Minute)
	defer cancel()
	store, err := openMigrated(ctx, cfg.Store, true)
	if err != nil {
		return err
	}
	defer store.Close()
	log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), nil))
	o := maintain.Options{PurgeInterval: -1, Logger: log, Sealer: cfg.Sealer(store, log)}
	var record func(audit.Event)
	if cfg.Audit != nil {
		events := ledger.NewEventBatcher(store, 0, log)
		defer events.Close()
		record, o.Flush = events.Record, events.Close
	}
	r := gateway.NewReconciler(cfg, store, record, log)
	if !r.Probing() {
		return errors.New("no route declares a probe (reconcile: in the configuration)")
	}
	o.Reconciler = r
	counts, err := maintain.Once(ctx, store, o)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "settled %d unknown operation(s)\n", counts.Settled)
	return err
}
