package main

import (
	"errors"
	"fmt"
	"os/user"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/ledger"
)

func newOpsResolveCmd() *cobra.Command {
	var (
		dsn, state, note, actor string
		asJSON                  bool
	)
	cmd := &cobra.Command{
		Use:   "resolve OP_ID --state succeeded|failed|prepared --note TEXT --store DSN",
		Short: "Settle an unknown operation on an operator's word, recorded in its history",
		Long: `resolve is reconciliation by hand: an operation is unknown when nobody knows
whether its effect happened. After checking the upstream (its records, its
lookups), say what happened: succeeded or failed (the effect is, or is not,
there: retries then replay that), or prepared (proven not applied: the next
retry with the same key performs it). Only an unknown operation can be
resolved. The note and the actor go into the operation's history.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			to, err := ledger.ParseState(state)
			if err != nil || (to != ledger.Succeeded && to != ledger.Failed && to != ledger.Prepared) {
				return errors.New(`--state must be "succeeded", "failed" or "prepared"`)
			}
			if note == "" {
				return errors.New("--note is required: say what you checked")
			}
			s, err := openStore(cmd.Context(), dsn, true)
			if err != nil {
				return err
			}
			defer s.Close()
			op, err := s.Resolve(cmd.Context(), ledger.ResolveParams{ID: args[0], To: to, Actor: actor, Note: note})
			if errors.Is(err, ledger.ErrIllegalTransition) {
				return fmt.Errorf("resolve %s: only an unknown operation can be resolved", args[0])
			}
			if err != nil {
				return fmt.Errorf("resolve %s: %w", args[0], err)
			}
			history, err := s.History(cmd.Context(), op.ID)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), ledger.NewView(op, history))
			}
			return writeDetail(cmd.OutOrStdout(), ledger.NewView(op, history))
		},
	}
	storeFlag(cmd, &dsn)
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "what happened: succeeded, failed, or prepared (proven not applied)")
	f.StringVar(&note, "note", "", "what you checked (recorded in the history)")
	f.StringVar(&actor, "actor", defaultActor(), "who decides (recorded in the history)")
	f.BoolVar(&asJSON, "json", false, "print JSON instead of text")
	_ = cmd.MarkFlagRequired("state")
	return cmd
}

// defaultActor names the operator by their login on this machine.
func defaultActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "operator:" + u.Username
	}
	return "operator"
}
