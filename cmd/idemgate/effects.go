package main

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control"
	"github.com/idemgate/idemgate/ledger"
)

func newEffectsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "effects",
		Short: "Read an operation's effects (the outbox) straight from a store, and settle a stuck one",
	}
	cmd.AddCommand(newEffectsListCmd(), newEffectsResolveCmd())
	return cmd
}

func newEffectsListCmd() *cobra.Command {
	var dsn, tenant, namespace string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list OPERATION_KEY --tenant T [--namespace N] --store DSN [--json]",
		Short: "List an operation's effects in their order: state, attempts, reference, last error",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore(cmd.Context(), dsn, true)
			if err != nil {
				return err
			}
			defer s.Close()
			es, err := s.Effects(cmd.Context(), ledger.OpKey{Tenant: tenant, Namespace: namespace, Key: args[0]})
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), contract.NewEffectViews(es))
			}
			return writeEffects(cmd.OutOrStdout(), es)
		},
	}
	storeFlag(cmd, &dsn)
	cmd.Flags().StringVar(&tenant, "tenant", "", "the operation's tenant (required)")
	cmd.Flags().StringVar(&namespace, "namespace", ledger.NamespaceClients, "the namespace of the operation's key")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	_ = cmd.MarkFlagRequired("tenant")
	return cmd
}

func writeEffects(w io.Writer, es []*ledger.Effect) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTARGET\tSTATE\tATTEMPTS\tDUE\tRESULT_REF\tLAST_ERROR")
	for _, e := range es {
		due := "-"
		switch {
		case e.Parked():
			due = "operator"
		case !e.NextAt.IsZero():
			due = stamp(e.NextAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", e.ID, e.Name, e.Target, e.State, e.Attempts, due,
			e.ResultRef, e.LastError)
	}
	return tw.Flush()
}

func newEffectsResolveCmd() *cobra.Command {
	var dsn, tenant, state, note, actor, ref string
	cmd := &cobra.Command{
		Use:   "resolve EFFECT_ID --tenant T --state prepared|succeeded|failed --note TEXT --store DSN [--result-ref REF]",
		Short: "Settle an effect that waits for an operator, or whose delivery is unknown",
		Long: `resolve settles an effect that is neither final nor being delivered: one that used its
attempts and waits for an operator, or one whose delivery is unknown. After checking the
target: succeeded or failed (the effect is, or is not, there; the operation's next effect
then goes out, or not), or prepared (deliver it again now, with the same key).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore(cmd.Context(), dsn, true)
			if err != nil {
				return err
			}
			defer s.Close()
			e, err := (&control.Operator{Store: s}).ResolveEffect(cmd.Context(), control.Local(actor),
				control.EffectResolution{EffectID: args[0], Tenant: tenant, State: state, Note: note, ResultRef: ref})
			if err != nil {
				return fmt.Errorf("resolve %s: %w", args[0], err)
			}
			return writeEffects(cmd.OutOrStdout(), []*ledger.Effect{e})
		},
	}
	storeFlag(cmd, &dsn)
	f := cmd.Flags()
	f.StringVar(&tenant, "tenant", "", "the effect's tenant (required)")
	f.StringVar(&state, "state", "", "succeeded, failed or prepared (required)")
	f.StringVar(&note, "note", "", "what you checked (required)")
	f.StringVar(&ref, "result-ref", "", "the target's reference for the effect")
	f.StringVar(&actor, "actor", defaultActor(), "who decides (recorded on the effect)")
	_ = cmd.MarkFlagRequired("tenant")
	return cmd
}
