package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/ledger"
)

// stdinIsTerminal reports whether a person may be typing on stdin: only
// then is a decision without --fingerprint confirmed by asking.
func stdinIsTerminal() bool { return term.IsTerminal(int(os.Stdin.Fd())) }

func newApprovalsCmd() *cobra.Command {
	var gw string
	cmd := &cobra.Command{
		Use:   "approvals",
		Short: "List, show and decide the approvals a running gateway holds for your tenant",
		Long: `approvals talks to a running gateway's control API (--gateway or IDEMGATE_URL)
as the principal whose token is in IDEMGATE_TOKEN; it sees and decides only the
approvals of that principal's tenant. A decision echoes the fingerprint of the
request it is for: pass --fingerprint (copied from "idemgate approvals show"),
or, at a terminal, confirm by typing the first 12 hex digits of it.`,
	}
	cmd.PersistentFlags().StringVar(&gw, "gateway", os.Getenv("IDEMGATE_URL"), "gateway URL (default $IDEMGATE_URL)")
	cmd.AddCommand(newApprovalsListCmd(&gw), newApprovalsShowCmd(&gw),
		newApprovalsDecideCmd(&gw, true), newApprovalsDecideCmd(&gw, false))
	return cmd
}

func newApprovalsListCmd(gw *string) *cobra.Command {
	var (
		status, after string
		limit         int
		all, asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "list [--status S|all] [--after CURSOR] [--limit N] [--all-pages] [--json]",
		Short: "List approvals, oldest first, one page at a time (pending ones unless --status says)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := listQuery(status, after, limit)
			if err != nil {
				return err
			}
			c, err := newApprovalsClient(*gw)
			if err != nil {
				return err
			}
			lv, err := listApprovals(cmd.Context(), c, q, all)
			if err != nil {
				return fmt.Errorf("list approvals: %w", err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), lv)
			}
			return writeApprovalTable(cmd.OutOrStdout(), lv, time.Now())
		},
	}
	f := cmd.Flags()
	f.StringVar(&status, "status", string(ledger.ApprovalPending), "only this status: pending, approved, denied, expired, used, or all")
	f.StringVar(&after, "after", "", "cursor: the next value printed by the previous page")
	f.IntVar(&limit, "limit", 0, fmt.Sprintf("page size, at most %d (0: the gateway's default)", ledger.MaxPage))
	f.BoolVar(&all, "all-pages", false, "follow the cursor to the last page")
	f.BoolVar(&asJSON, "json", false, "print the list view as JSON instead of a table")
	return cmd
}

// listQuery is the page of approvals the list flags ask for.
func listQuery(status, after string, limit int) (client.ApprovalQuery, error) {
	q := client.ApprovalQuery{After: after, Limit: limit}
	if status != "all" {
		st, err := ledger.ParseApprovalStatus(status)
		if err != nil {
			return q, fmt.Errorf("--status: %w", err)
		}
		q.Status = string(st)
	}
	if limit < 0 || limit > ledger.MaxPage {
		return q, fmt.Errorf("--limit %d: want 1 to %d", limit, ledger.MaxPage)
	}
	return q, nil
}

func newApprovalsShowCmd(gw *string) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID [--json]",
		Short: "Show what an approval is for: the target, the command, its consequence and fingerprint",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newApprovalsClient(*gw)
			if err != nil {
				return err
			}
			v, err := c.Approval(cmd.Context(), args[0])
			if err != nil {
				return approvalErr("show", args[0], err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), v)
			}
			return writeApproval(cmd.OutOrStdout(), v, time.Now())
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the approval view as JSON instead of text")
	return cmd
}

// decideFlags are the flags of approve and deny.
type decideFlags struct {
	fingerprint, note string
	asJSON            bool
}

func newApprovalsDecideCmd(gw *string, approve bool) *cobra.Command {
	var f decideFlags
	verb, what := "approve", "Approve the request an approval waits for: the gateway then runs it on the agent's retry"
	if !approve {
		verb, what = "deny", "Deny the request an approval waits for: the operation fails, and every retry gets 403"
	}
	cmd := &cobra.Command{
		Use:   verb + " ID [--fingerprint FP] [--note TEXT] [--json]",
		Short: what,
		Long: what + `.

With --fingerprint (copy it from "idemgate approvals show ID"), the decision is
sent for that fingerprint, and the gateway refuses it (approval_mismatch) if the
approval waits for another request. Without it, the approval is shown and, only
when stdin is a terminal, you confirm by typing the first 12 hex digits of its
fingerprint; anything else sends nothing.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newApprovalsClient(*gw)
			if err != nil {
				return err
			}
			return runDecide(cmd, c, verb, args[0], f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.fingerprint, "fingerprint", "", "the fingerprint decided on, sha256:… (default: confirm at the terminal)")
	fl.StringVar(&f.note, "note", "", "why, recorded with the decision")
	fl.BoolVar(&f.asJSON, "json", false, "print the decided approval view as JSON")
	return cmd
}

// runDecide posts one decision, asking first when no fingerprint is given.
func runDecide(cmd *cobra.Command, c *client.Client, verb, id string, f decideFlags) error {
	fp := f.fingerprint
	if fp == "" {
		var err error
		if fp, err = confirmAtTerminal(cmd, c, verb, id); err != nil {
			return err
		}
	}
	decide := c.Approve
	if verb == "deny" {
		decide = c.Deny
	}
	v, err := decide(cmd.Context(), id, contract.Decision{Fingerprint: fp, Note: f.note})
	if err != nil {
		return approvalErr(verb, id, err)
	}
	if f.asJSON {
		return writeJSON(cmd.OutOrStdout(), v)
	}
	past := map[string]string{"approve": "approved", "deny": "denied"}[verb]
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s (operation %s, %s) by %s\n", past, safe(v.ID),
		safe(v.OperationID), safe(v.Target), safe(v.DecidedBy))
	return err
}

// confirmAtTerminal shows the approval on stderr and, at a terminal, asks
// for the first 12 hex digits of its fingerprint; it returns the
// fingerprint only when the answer matches.
func confirmAtTerminal(cmd *cobra.Command, c *client.Client, verb, id string) (string, error) {
	v, err := c.Approval(cmd.Context(), id)
	if err != nil {
		return "", approvalErr(verb, id, err)
	}
	w := cmd.ErrOrStderr()
	if err := writeApproval(w, v, time.Now()); err != nil {
		return "", err
	}
	digits, ok := strings.CutPrefix(v.Fingerprint, "sha256:")
	switch {
	case !ledger.ValidFingerprint(v.Fingerprint) || !ok:
		return "", fmt.Errorf("%s %s: the gateway sent no valid fingerprint: nothing was sent", verb, safe(id))
	case v.Status != ledger.ApprovalPending:
		return "", fmt.Errorf("%s %s: it is %s, not pending: nothing was sent", verb, safe(id), safe(string(v.Status)))
	case !stdinIsTerminal():
		return "", fmt.Errorf("%s %s: stdin is not a terminal: pass --fingerprint (copy it from `idemgate approvals show %s`)",
			verb, safe(id), safe(id))
	}
	fmt.Fprintf(w, "\n%s %s? Type the first 12 hex digits of the fingerprint to %s: ",
		strings.ToUpper(verb[:1])+verb[1:], safe(v.Summary), map[string]string{"approve": "confirm", "deny": "deny"}[verb])
	answer, err := bufio.NewReader(io.LimitReader(cmd.InOrStdin(), 256)).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("%s %s: read the answer: %w", verb, safe(id), err)
	}
	if strings.ToLower(strings.TrimSpace(answer)) != digits[:12] {
		return "", fmt.Errorf("%s %s: the answer is not the fingerprint's first 12 hex digits: nothing was sent", verb, safe(id))
	}
	return v.Fingerprint, nil
}

// approvalErr names the command and the approval in err, with the
// gateway's words made safe to print, and says what a 404 means: none of
// that id in the caller's tenant.
func approvalErr(verb, id string, err error) error {
	err = printable(err)
	if client.IsNotFound(err) {
		return fmt.Errorf("%s %s: %s: no such approval (in your tenant)", verb, safe(id), contract.CodeNotFound)
	}
	return fmt.Errorf("%s %s: %w", verb, safe(id), err)
}

// printable is err with the gateway's words (a problem's code and
// detail, another answer's text) made safe to print on a terminal, and a
// hint where a 401 means the token.
func printable(err error) error {
	var se *client.StatusError
	if errors.As(err, &se) { // a proxy's page, say: its status only, as it stands
		return fmt.Errorf("the gateway answered %d, not a problem: %s", se.Status, safe(se.Text))
	}
	var p *contract.Problem
	if !errors.As(err, &p) {
		return err
	}
	q := *p
	q.Code, q.Detail = safe(q.Code), safe(q.Detail)
	if q.Code == contract.CodeUnauthorized {
		q.Detail += " (check IDEMGATE_TOKEN)"
	}
	return &q
}

// newApprovalsClient is the control API's client for the gateway at gw,
// as the principal whose token is in the environment, never in a flag
// (shell history, ps).
func newApprovalsClient(gw string) (*client.Client, error) {
	if gw == "" {
		return nil, errors.New("no gateway: pass --gateway or set IDEMGATE_URL")
	}
	token := os.Getenv("IDEMGATE_TOKEN")
	if token == "" {
		return nil, errors.New("no token: set IDEMGATE_TOKEN")
	}
	return client.New(gw, token)
}

// listApprovals reads one page of approvals, or every page from q's
// cursor on.
func listApprovals(ctx context.Context, c *client.Client, q client.ApprovalQuery, all bool) (contract.ApprovalListView, error) {
	lv := contract.ApprovalListView{Approvals: []*contract.ApprovalView{}}
	for {
		page, err := c.Approvals(ctx, q)
		if err != nil {
			return lv, printable(err)
		}
		lv.Approvals, lv.Next = append(lv.Approvals, page.Approvals...), page.Next
		if !all || page.Next == nil {
			return lv, nil
		}
		if *page.Next == q.After {
			return lv, fmt.Errorf("the gateway gave the same cursor %s twice", safe(*page.Next))
		}
		q.After = *page.Next
	}
}

// writeApprovalTable prints a page of approvals, and the cursor of the next.
func writeApprovalTable(w io.Writer, lv contract.ApprovalListView, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tOPERATION\tTARGET\tSUMMARY\tREQUESTED BY\tSTATUS\tTIME LEFT")
	for _, a := range lv.Approvals {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", safe(a.ID), safe(a.OperationID), safe(a.Target),
			safe(truncateRunes(a.Summary, 40)), safe(a.RequestedBy), safe(string(a.Status)), timeLeftOf(a, now))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if lv.Next != nil {
		_, err := fmt.Fprintf(w, "next: --after %s\n", safe(*lv.Next))
		return err
	}
	return nil
}

// writeApproval prints what an approver must see before deciding.
func writeApproval(w io.Writer, v *contract.ApprovalView, now time.Time) error {
	var b strings.Builder
	row := func(k, v string) { fmt.Fprintf(&b, "%-13s %s\n", k+":", v) }
	row("approval", safe(v.ID))
	row("target", safe(v.Target))
	row("operation", fmt.Sprintf("%s (key %s)", safe(v.OperationID), safe(v.Key)))
	row("route", safe(v.Route))
	row("summary", safe(v.Summary))
	row("reversible", reversibleText(v.Reversible))
	row("fingerprint", safe(v.Fingerprint))
	b.WriteString("command:\n" + commandText(v.Command))
	row("requested by", safe(v.RequestedBy))
	row("approvers", safe(strings.Join(v.Approvers, ", ")))
	row("status", safe(string(v.Status)))
	if v.DecidedBy != "" || v.DecidedAt != nil {
		row("decided by", safe(v.DecidedBy))
		if v.DecidedAt != nil {
			row("decided at", stamp(*v.DecidedAt))
		}
		row("note", safe(v.Note))
	}
	if v.Status == ledger.ApprovalPending || v.Status == ledger.ApprovalApproved || v.Status == ledger.ApprovalExpired {
		row("time left", fmt.Sprintf("%s (expires %s)", timeLeftOf(v, now), stamp(v.ExpiresAt)))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// reversibleText says plainly whether the effect can be undone.
func reversibleText(r *bool) string {
	switch {
	case r == nil:
		return "not stated: treat it as NOT reversible"
	case *r:
		return "yes"
	}
	return "no: NOT reversible, it cannot be undone"
}

// commandText is the command's JSON, pretty-printed and indented, with
// nothing in it that a terminal would take for a control sequence.
func commandText(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "  (none)\n"
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "  ", "  "); err != nil {
		return "  " + safe(string(raw)) + "\n"
	}
	lines := strings.Split(out.String(), "\n")
	for i, l := range lines {
		lines[i] = safe(l)
	}
	return "  " + strings.Join(lines, "\n") + "\n"
}

// timeLeftOf is how long until an approval expires, "expired" past it, and
// "-" once it was denied or used.
func timeLeftOf(a *contract.ApprovalView, now time.Time) string {
	switch a.Status {
	case ledger.ApprovalDenied, ledger.ApprovalUsed:
		return "-"
	case ledger.ApprovalExpired:
		return "expired"
	}
	return humanDuration(a.ExpiresAt.Sub(now))
}

// humanDuration is d in its two largest units: 45s, 14m32s, 2h05m, 3d4h;
// "expired" when d is not positive.
func humanDuration(d time.Duration) string {
	d = d.Round(time.Second)
	switch {
	case d <= 0:
		return "expired"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%dh", int(d.Hours())/24, int(d.Hours())%24)
}

// truncateRunes cuts s to at most n characters, marking the cut with "…".
func truncateRunes(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// safe makes text from the gateway safe to print on a terminal: every
// character that is not printable (control characters such as ESC and CR,
// invalid UTF-8, bidirectional overrides and other format characters) is
// written as its Go escape, so a hostile summary cannot move the cursor,
// clear the screen or fake a line.
func safe(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case strconv.IsPrint(r):
			b.WriteRune(r)
		default:
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		}
		i += size
	}
	return b.String()
}
