package main

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control"
	"github.com/idemgate/idemgate/ledger"
)

func newOpsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ops",
		Short: "Read operations straight from a store, and resolve unknown ones",
	}
	cmd.AddCommand(newOpsListCmd(), newOpsShowCmd(), newOpsResolveCmd())
	return cmd
}

func newOpsListCmd() *cobra.Command {
	var (
		dsn, state string
		p          ledger.ListParams
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "list [--state S] [--tenant T] [--after CURSOR] [--limit N] [--json]",
		Short: "List operations, oldest first, one page at a time",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if state != "" {
				st, err := ledger.ParseState(state)
				if err != nil {
					return err
				}
				p.State = st
			}
			s, err := openStore(cmd.Context(), dsn, true)
			if err != nil {
				return err
			}
			defer s.Close()
			page, err := s.List(cmd.Context(), p)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), contract.NewListView(page))
			}
			return writeTable(cmd.OutOrStdout(), page)
		},
	}
	storeFlag(cmd, &dsn)
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "only this state: prepared, executing, succeeded, failed or unknown")
	f.StringVar(&p.Tenant, "tenant", "", "only this tenant")
	f.StringVar(&p.After, "after", "", "cursor: the next value printed by the previous page")
	f.IntVar(&p.Limit, "limit", ledger.DefaultPage, fmt.Sprintf("page size, at most %d", ledger.MaxPage))
	f.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	return cmd
}

func newOpsShowCmd() *cobra.Command {
	var (
		dsn    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "show OP_ID --store DSN [--json]",
		Short: "Show one operation and its history",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore(cmd.Context(), dsn, true)
			if err != nil {
				return err
			}
			defer s.Close()
			o := &control.Operator{Store: s}
			op, err := o.Operation(cmd.Context(), control.Local(""), args[0])
			if err != nil {
				return err
			}
			return showOperation(cmd, o, op, asJSON)
		},
	}
	storeFlag(cmd, &dsn)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of text")
	return cmd
}

// showOperation prints op's view, as the control API renders it (the
// Operator's): its history, its effects and its approval.
func showOperation(cmd *cobra.Command, o *control.Operator, op *ledger.Operation, asJSON bool) error {
	v, err := o.View(cmd.Context(), op)
	if err != nil {
		return err
	}
	if asJSON {
		return writeJSON(cmd.OutOrStdout(), v)
	}
	return writeDetail(cmd.OutOrStdout(), v)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z") }

func writeTable(w io.Writer, page ledger.Page) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tKEY\tROUTE\tSTATE\tATTEMPTS\tUPDATED")
	for _, op := range page.Operations {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", op.ID, op.Tenant, op.Key, op.Route, op.State,
			op.Attempts, stamp(op.UpdatedAt))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Next != "" {
		_, err := fmt.Fprintf(w, "next: --after %s\n", page.Next)
		return err
	}
	return nil
}

func writeDetail(w io.Writer, v contract.View) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	row("id", v.ID)
	row("tenant", v.Tenant)
	row("key", v.Key)
	row("route", v.Route)
	row("state", string(v.State))
	row("fingerprint", v.Fingerprint)
	row("attempts", fmt.Sprint(v.Attempts))
	row("created", stamp(v.CreatedAt))
	row("updated", stamp(v.UpdatedAt))
	row("expires", stamp(v.ExpiresAt))
	if v.LeaseUntil != nil {
		row("lease until", stamp(*v.LeaseUntil))
	}
	if v.Response != nil {
		row("response", fmt.Sprintf("status %d", v.Response.Status))
	}
	if v.LastError != "" {
		row("last error", v.LastError)
	}
	if a := v.Approval; a != nil {
		row("approval", fmt.Sprintf("%s %s (expires %s): %s", safe(a.ID), safe(string(a.Status)), stamp(a.ExpiresAt), safe(a.Summary)))
		if a.DecidedBy != "" {
			row("decided by", safe(a.DecidedBy)+": "+safe(a.Note))
		}
	}
	fmt.Fprintln(tw, "\nhistory:\tAT\tFROM\tTO\tACTOR\tREASON")
	for _, h := range v.History {
		from := "-"
		if h.From != nil {
			from = string(*h.From)
		}
		fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s\t%s\n", stamp(h.At), from, h.To, h.Actor, h.Reason)
	}
	if len(v.Effects) > 0 {
		fmt.Fprintln(tw, "\neffects:\tNAME\tTARGET\tSTATE\tATTEMPTS\tRESULT_REF\tLAST_ERROR")
		for _, e := range v.Effects {
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%d\t%s\t%s\n", e.Name, e.Target, e.State, e.Attempts, e.ResultRef, e.LastError)
		}
	}
	return tw.Flush()
}
