package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"os"
	"os/user"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control"
	"github.com/idemgate/idemgate/internal/size"
)

// answerFlags are the upstream's answer, as an operator gives it.
type answerFlags struct {
	status         int
	headers        []string // "Name: value"
	body, bodyFile string
	maxResponse    string
	resultRef      string
}

func newOpsResolveCmd() *cobra.Command {
	var (
		dsn, state, note, actor string
		result                  string
		asJSON, duplicate       bool
		a                       answerFlags
	)
	cmd := &cobra.Command{
		Use: "resolve OP_ID --state succeeded|failed|prepared --note TEXT --store DSN " +
			"[--status N [--header 'Name: value']... [--body-file FILE | --body TEXT] | --result JSON] [--result-ref REF]",
		Short: "Settle an unknown operation on an operator's word, recorded in its history",
		Long: `resolve is reconciliation by hand: an operation is unknown when nobody knows
whether its effect happened. After checking the upstream (its records, its
lookups), say what happened: succeeded or failed (the effect is, or is not,
there: retries then replay that), or prepared (proven not applied: the next
retry with the same key performs it). Only an unknown operation can be
resolved. The note and the actor go into the operation's history.

With succeeded or failed, give the upstream's answer if you found it:
--status, --header (repeated) and the body (--body-file or --body, UTF-8
text, at most --max-response). Retries then get exactly that answer, marked
Idempotent-Replayed; without one they get the gateway's summary, which says
that an operator resolved the operation. --result-ref is the upstream's
reference for the effect (a ticket's id, a payment's). An action's operation
(docs/design.md, "Actions") takes --result instead: the JSON its owner would
have recorded (at most 64KiB), which retries then get as their result.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			answer, max, err := a.answer(cmd)
			if err != nil {
				return err
			}
			s, err := openStore(cmd.Context(), dsn, true)
			if err != nil {
				return err
			}
			defer s.Close()
			o := &control.Operator{Store: s, MaxResponse: max}
			res := control.Resolution{OperationID: args[0], State: state, Note: note, Response: answer,
				ResultRef: a.resultRef, Duplicate: duplicate}
			if cmd.Flags().Changed("result") {
				res.Result = json.RawMessage(result)
			}
			op, err := o.Resolve(cmd.Context(), control.Local(actor), res)
			if err != nil {
				return fmt.Errorf("resolve %s: %w", args[0], err)
			}
			return showOperation(cmd, o, op, asJSON)
		},
	}
	storeFlag(cmd, &dsn)
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "what happened: succeeded, failed, or prepared (proven not applied)")
	f.StringVar(&note, "note", "", "what you checked (recorded in the history)")
	f.StringVar(&actor, "actor", defaultActor(), "who decides (recorded in the history)")
	f.BoolVar(&asJSON, "json", false, "print JSON instead of text")
	f.StringVar(&result, "result", "", "an action's result, as JSON (instead of an answer)")
	f.BoolVar(&duplicate, "duplicate", false, "the effect was made twice despite the checks (recorded as such)")
	a.define(cmd)
	_ = cmd.MarkFlagRequired("state")
	return cmd
}

// define declares the answer's flags on cmd.
func (a *answerFlags) define(cmd *cobra.Command) {
	f := cmd.Flags()
	f.IntVar(&a.status, "status", 0, "the upstream's answer: its status (200 to 599)")
	f.StringArrayVar(&a.headers, "header", nil, "the upstream's answer: a header, 'Name: value' (repeatable)")
	f.StringVar(&a.body, "body", "", "the upstream's answer: its body, as text")
	f.StringVar(&a.bodyFile, "body-file", "", "the upstream's answer: a file holding its body (- for standard input)")
	f.StringVar(&a.maxResponse, "max-response", "1MiB", "the largest body accepted: the gateway's max_response")
	f.StringVar(&a.resultRef, "result-ref", "", "the upstream's reference for the effect")
	cmd.MarkFlagsMutuallyExclusive("body", "body-file")
}

// answer is the upstream's answer given on cmd, and the largest body
// accepted (the Operator checks it, as it checks the control API's); nil
// when no --status is given.
func (a *answerFlags) answer(cmd *cobra.Command) (*contract.Answer, int64, error) {
	max, err := size.Parse(a.maxResponse)
	if err != nil {
		return nil, 0, fmt.Errorf("--max-response: %w", err)
	}
	if !cmd.Flags().Changed("status") {
		if len(a.headers) > 0 || cmd.Flags().Changed("body") || a.bodyFile != "" {
			return nil, 0, errors.New("--header, --body and --body-file need --status")
		}
		return nil, max, nil
	}
	ans := &contract.Answer{Status: a.status, Body: a.body, Headers: map[string][]string{}}
	for _, h := range a.headers {
		name, value, ok := strings.Cut(h, ":")
		if !ok {
			return nil, 0, fmt.Errorf("--header %q: want 'Name: value'", h)
		}
		name = textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(name))
		ans.Headers[name] = append(ans.Headers[name], strings.Trim(value, " \t")) // a CR or LF is refused
	}
	if a.bodyFile != "" {
		b, err := readBodyFile(cmd.InOrStdin(), a.bodyFile, max)
		if err != nil {
			return nil, 0, err
		}
		ans.Body = string(b)
	}
	return ans, max, nil
}

// readBodyFile reads at most max+1 bytes of path (- for standard input):
// enough for the answer's check to refuse a larger one.
func readBodyFile(stdin io.Reader, path string, max int64) ([]byte, error) {
	f := stdin
	if path != "-" {
		file, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--body-file: %w", err)
		}
		defer file.Close()
		f = file
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("--body-file: %w", err)
	}
	return b, nil
}

// defaultActor names the operator by their login on this machine.
func defaultActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "operator:" + u.Username
	}
	return "operator"
}
