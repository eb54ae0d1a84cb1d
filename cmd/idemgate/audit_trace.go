package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/audit"
	"github.com/idemgate/idemgate/ledger"
)

func newAuditTraceCmd() *cobra.Command {
	var (
		dsn    string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "trace OP_ID [--json] --store DSN",
		Short: "Answer the four questions of a disputed write from the operation's audit events",
		Long: `trace answers, from the audit events of one operation, the four questions of a disputed
write: which agent run sent each request (run_id, from Idempotency-Run), with which key,
under which fingerprint, and what the upstream answered (upstream_status and
result_ref). It prints one row per event, in the order recorded: its position in the
log (or "unsealed"), time, kind, run, principal, key, fingerprint, upstream status,
result reference and trace id; "-" is a value the event does not hold. Below the table a
summary counts the requests forwarded upstream, the replays (answered from the stored
response: nothing sent, never a creation) and the conflicts, and names the latest
state an event records. Nothing is inferred: every value is an event's.

--json prints one JSON array of the event objects instead, with the export's field
names; a sealed event's object is byte for byte its export line, an unsealed one has
"seq": null.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore(cmd.Context(), dsn, true)
			if err != nil {
				return err
			}
			defer s.Close()
			evs, err := operationEvents(cmd.Context(), s, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeTraceJSON(cmd.OutOrStdout(), evs)
			}
			return writeTrace(cmd.OutOrStdout(), evs)
		},
	}
	storeFlag(cmd, &dsn)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the events as a JSON array instead of a table")
	return cmd
}

// operationEvents reads all of an operation's events, page by page, in
// the order they were recorded.
func operationEvents(ctx context.Context, s ledger.Store, opID string) ([]audit.Event, error) {
	var out []audit.Event
	p := ledger.AuditParams{OperationID: opID, Limit: ledger.MaxPage}
	for {
		page, err := s.AuditEvents(ctx, p)
		if err != nil {
			return nil, fmt.Errorf("trace: %w", err)
		}
		out = append(out, page...)
		if len(page) < p.PageLimit() {
			break
		}
		p.After = page[len(page)-1].ID
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("trace %s: %w", opID, ledger.ErrNotFound)
	}
	return out, nil
}

// writeTrace writes the events as a table, then the summary.
func writeTrace(w io.Writer, evs []audit.Event) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEQ\tAT\tKIND\tRUN\tPRINCIPAL\tKEY\tFINGERPRINT\tUPSTREAM\tRESULT_REF\tTRACE\tACTOR")
	for _, e := range evs {
		seq, status := "unsealed", ""
		if e.Seq >= 0 {
			seq = strconv.FormatInt(e.Seq, 10)
		}
		if e.UpstreamStatus != 0 {
			status = strconv.Itoa(e.UpstreamStatus)
		}
		cells := []string{seq, stamp(e.At), string(e.Kind), e.RunID, e.Principal, e.Key, e.Fingerprint, status,
			e.ResultRef, e.TraceID, e.Actor} // the actor: who made a transition (an operator resolving)
		for i, c := range cells {
			cells[i] = cell(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\n%s\n", traceSummary(evs))
	return err
}

// cell is a value as the table shows it: "-" for none, and never a
// character that could move the cursor or break the columns.
func cell(s string) string {
	if s == "" {
		return "-"
	}
	return safe(s)
}

// traceSummary is the paragraph under the table: what the events say was
// sent, replayed and refused, and the latest state they record.
func traceSummary(evs []audit.Event) string {
	count := map[audit.Kind]int{}
	var runs []string
	unsealed := 0
	for _, e := range evs {
		count[e.Kind]++
		if e.Kind == audit.Forwarded && e.RunID != "" && !slices.Contains(runs, e.RunID) {
			runs = append(runs, e.RunID)
		}
		if e.Seq < 0 {
			unsealed++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d events", len(evs))
	if unsealed > 0 {
		fmt.Fprintf(&b, " (%d not yet sealed into the log)", unsealed)
	}
	fmt.Fprintf(&b, ". Forwarded upstream: %d", count[audit.Forwarded])
	if len(runs) > 0 {
		fmt.Fprintf(&b, " (by run %s)", safe(strings.Join(runs, ", ")))
	}
	fmt.Fprintf(&b, ". Replayed from the stored answer, nothing sent and never a creation: %d. "+
		"Conflicts (the key with another request): %d. %s.", count[audit.Replayed], count[audit.Conflict],
		latestState(evs))
	return b.String()
}

// latestState names the state the last transition event moved to, with
// the upstream's status and reference if that event holds them.
func latestState(evs []audit.Event) string {
	for _, e := range slices.Backward(evs) {
		if e.To == "" {
			continue
		}
		s := "Latest state: " + safe(e.To) + " (not final)"
		if ledger.State(e.To).Final() {
			s = "Final state: " + e.To
		}
		if e.UpstreamStatus != 0 {
			s += fmt.Sprintf(", upstream %d", e.UpstreamStatus)
		}
		if e.ResultRef != "" {
			s += ", result_ref " + safe(e.ResultRef)
		}
		return s
	}
	return "No event records a state"
}

// writeTraceJSON writes the events as one JSON array, an event per line.
func writeTraceJSON(w io.Writer, evs []audit.Event) error {
	var b bytes.Buffer
	b.WriteString("[\n")
	for i, e := range evs {
		obj, err := eventJSON(e)
		if err != nil {
			return fmt.Errorf("trace: %w", err)
		}
		if i > 0 {
			b.WriteString(",\n")
		}
		b.Write(obj)
	}
	b.WriteString("\n]\n")
	_, err := w.Write(b.Bytes())
	return err
}

// eventJSON is an event's object as an export line holds it; an unsealed
// event, which has no position, has "seq": null. In canonical JSON every
// quote inside a string is escaped, so `,"seq":0,` can only be the member.
func eventJSON(e audit.Event) ([]byte, error) {
	if e.Seq >= 0 {
		return e.Leaf()
	}
	e.Seq = 0
	leaf, err := e.Leaf()
	if err != nil {
		return nil, err
	}
	return bytes.Replace(leaf, []byte(`,"seq":0,`), []byte(`,"seq":null,`), 1), nil
}
