package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/agent"
)

// exitCode ends the process with a status and nothing more on stderr: the
// command has already printed what happened.
type exitCode int

func (e exitCode) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// callExit is the documented exit status of each outcome kind.
var callExit = map[agent.Kind]exitCode{
	agent.Created: 0, agent.Replayed: 0,
	agent.InProgress: 3, agent.NeedsApproval: 4, agent.Conflict: 5, agent.Rejected: 6,
	agent.Unauthorized: 7, agent.Unknown: 8, agent.Failed: 9,
}

// exitFailedForNow is a failure the policy had not finished with (the
// gateway unreachable, or "not now" past the budget): a shell loop reruns
// the same call later, where 9 means rerunning gets the same answer.
const exitFailedForNow exitCode = 10

const callExitHelp = `Exit status: 0 created or replayed; 3 in_progress; 4 needs_approval;
5 conflict (the key was used with another request); 6 rejected (validation or
business refusal); 7 unauthorized; 8 unknown (do not retry: reconcile);
9 failed (rerunning gets the same answer); 10 failed for now (the gateway was
unreachable or said "not now": nothing was applied, rerun the same call
later); 2 refused locally before sending (bad input, a changed payload on
resume, a repeat or revise while the intent is not settled); 1 any other
error. The JSON says why (reason) and whether anything reached the gateway
(sent: no, maybe or yes).`

// callFlags are what call, call status and mcp share.
type callFlags struct {
	intent, step, journal, gateway, run string
	agentName, secretFile               string
}

func (f *callFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.intent, "intent", "", "the logical action's name, e.g. task-42/create-ticket (required)")
	cmd.Flags().StringVar(&f.step, "step", "", "one step of the workflow --intent names: the intent INTENT/STEP, "+
		"with its own key (letters, digits, '.', '_', ':', '-')")
	f.addCommon(cmd)
}

// target is the intent the flags name: --intent, or with --step that
// workflow step's own intent, as agent.Client.RunWorkflow runs it.
func (f *callFlags) target() (string, error) {
	if f.intent == "" {
		return "", errors.New("--intent is required: name the logical action")
	}
	if f.step == "" {
		return f.intent, nil
	}
	intent, err := agent.StepIntent(f.intent, f.step)
	if err != nil {
		return "", fmt.Errorf("--step: %w", err)
	}
	return intent, nil
}

// addCommon adds the journal and gateway flags.
func (f *callFlags) addCommon(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&f.journal, "journal", os.Getenv("IDEMGATE_JOURNAL"), "journal file (default $IDEMGATE_JOURNAL, "+
		"else ~/.local/state/idemgate/journal.db)")
	fl.StringVar(&f.gateway, "gateway", os.Getenv("IDEMGATE_URL"), "gateway URL (default $IDEMGATE_URL)")
	fl.StringVar(&f.agentName, "agent", os.Getenv(agent.EnvAgent), "this agent's name, part of every key it "+
		"derives: agents sharing a secret need names of their own (default $IDEMGATE_AGENT, else none)")
	fl.StringVar(&f.secretFile, "agent-secret-file", "", "the file holding the secret keys are derived from "+
		"(default $IDEMGATE_AGENT_SECRET_FILE, else the secret in $IDEMGATE_AGENT_SECRET, else "+
		"~/.config/idemgate/agent-secret, made on first use)")
}

// keys are the agent's: its secret (agent.LoadSecret: never a flag's
// value, which shell history and ps would show) and its name.
func (f *callFlags) keys() (*agent.Keys, error) {
	secret, err := agent.LoadSecret(f.secretFile)
	if err != nil {
		return nil, err
	}
	return agent.NewKeys(secret, f.agentName)
}

// addRun adds --run, for the commands that write.
func (f *callFlags) addRun(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.run, "run", "", "the agent run this is part of, sent as Idempotency-Run for the "+
		"audit log (default: a run made for this process, run_<ULID>)")
}

// client opens the journal and builds the client; the token only ever
// comes from the environment, never from a flag (shell history, ps).
func (f *callFlags) client(ctx context.Context) (*agent.Client, error) {
	if f.run != "" {
		if err := agent.CheckRun(f.run); err != nil {
			return nil, fmt.Errorf("--run: %w", err)
		}
	}
	if f.gateway == "" {
		return nil, errors.New("no gateway: pass --gateway or set IDEMGATE_URL")
	}
	token := os.Getenv("IDEMGATE_TOKEN")
	if token == "" {
		return nil, errors.New("no token: set IDEMGATE_TOKEN")
	}
	keys, err := f.keys()
	if err != nil {
		return nil, err
	}
	path := f.journal
	if path == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
		path = filepath.Join(home, ".local", "state", "idemgate", "journal.db")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return nil, fmt.Errorf("journal: %w", err)
		}
	}
	j, err := agent.OpenJournal(ctx, path)
	if err != nil {
		return nil, err
	}
	return &agent.Client{BaseURL: f.gateway, Token: token, Journal: j, Run: f.run, Keys: keys}, nil
}

func newCallCmd() *cobra.Command {
	var (
		f              callFlags
		data           string
		repeat, revise bool
		approvalWait   time.Duration
	)
	cmd := &cobra.Command{
		Use:   "call --intent NAME [--step STEP] [--journal FILE] [--gateway URL] [--run ID] [--repeat|--revise] [--approval-wait DURATION] METHOD PATH [-d JSON|@file]",
		Short: "Send one write through the gateway, keeping its key across retries and restarts",
		Long: `call sends a write for a named intent. The intent's key is made once and written
to the journal before anything is sent, so running the same call again (after a
timeout, a crash, a reboot) resumes the same action instead of starting another.
The key is derived from the intent and the agent's secret (--agent-secret-file,
else $IDEMGATE_AGENT_SECRET, else ~/.config/idemgate/agent-secret, made on first
use) and name (--agent): with the journal lost, the same call makes the same key,
and the gateway replays what it did instead of doing it again.
--repeat asks for a new, identical action (a new intent, NAME#2); --revise for
changed parameters (a new version of the intent). Errors are retried as the
gateway's contract allows; a lost answer is checked with the gateway, never
re-sent blind. The outcome is printed as JSON on stdout. The token comes from
IDEMGATE_TOKEN. Every request names the agent run it is part of
(Idempotency-Run, which the gateway's audit log records): --run ID, else a run
made for this process, so a loop of calls that are one run passes --run.

A write that needs a human's approval is needs_approval (exit 4), with the
approval (id, status, summary, expires_at) in the JSON; nothing reached the
API. Running the same call again resumes it, and runs it once approved.
--approval-wait 10m waits up to that long for the decision instead, re-sending
the same request with the same key (Prefer: wait) until it is approved (then
the executed outcome), denied (failed, exit 9) or the wait is spent (exit 4).

--step STEP makes the write one step of a workflow, the intent NAME: it runs
under the intent NAME/STEP, with a key of its own, exactly as the Go client's
RunWorkflow runs that step, so a script may do a workflow step by step and a
program resume it (or the other way round). Run the steps in order and stop at
the first that does not exit 0; running a step again that succeeded replays
its answer and performs nothing. --repeat cannot take a step (it would make an
intent outside the workflow): name a new workflow intent instead.

` + callExitHelp,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return exitWith(cmd, 2, fmt.Errorf("want METHOD and PATH, got %d argument(s)", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			intent, err := f.target()
			if err != nil {
				return exitWith(cmd, 2, err)
			}
			if repeat && f.step != "" {
				return exitWith(cmd, 2, errors.New("--repeat and --step exclude each other: name a new workflow intent"))
			}
			if repeat && revise {
				return exitWith(cmd, 2, errors.New("--repeat and --revise exclude each other"))
			}
			if approvalWait < 0 {
				return exitWith(cmd, 2, errors.New("--approval-wait must not be negative"))
			}
			body, err := readData(data, cmd.InOrStdin())
			if err != nil {
				return exitWith(cmd, 2, err)
			}
			mode := agent.Resume
			if repeat {
				mode = agent.Repeat
			} else if revise {
				mode = agent.Revise
			}
			return runCall(cmd, &f, agent.Policy{ApprovalWait: approvalWait},
				agent.Action{Intent: intent, Method: args[0], Path: args[1], Body: body, Mode: mode})
		},
	}
	f.add(cmd)
	f.addRun(cmd)
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error { return exitWith(c, 2, err) })
	cmd.Flags().StringVarP(&data, "data", "d", "", "the JSON body, or @FILE, or @- for stdin")
	cmd.Flags().BoolVar(&repeat, "repeat", false, "a new, identical action: new intent, new key")
	cmd.Flags().BoolVar(&revise, "revise", false, "changed parameters: new version of the intent, new key")
	cmd.Flags().DurationVar(&approvalWait, "approval-wait", 0, "wait up to this long (e.g. 10m) for a human's "+
		"decision when the write needs approval; 0: return needs_approval at once")
	cmd.AddCommand(newCallStatusCmd())
	return cmd
}

func runCall(cmd *cobra.Command, f *callFlags, p agent.Policy, a agent.Action) error {
	c, err := f.client(cmd.Context())
	if errors.Is(err, agent.ErrInvalidRun) {
		return exitWith(cmd, 2, err)
	}
	if err != nil {
		return err
	}
	defer c.Journal.Close()
	c.Policy = p
	out, err := c.Do(cmd.Context(), a)
	switch {
	case errors.Is(err, agent.ErrPayloadChanged), errors.Is(err, agent.ErrInvalidAction),
		errors.Is(err, agent.ErrNotSettled), errors.Is(err, agent.ErrNoIntent):
		return exitWith(cmd, 2, err)
	case err != nil && out.Key == "":
		return err
	}
	if werr := writeJSON(cmd.OutOrStdout(), f.stepped(callView(out))); werr != nil {
		return werr
	}
	if err != nil { // interrupted, or the journal failed: the outcome so far is printed
		fmt.Fprintln(cmd.ErrOrStderr(), "idemgate:", err)
	}
	if code := exitOf(out); code != 0 {
		return code
	}
	return nil
}

// exitOf is the documented exit status of an outcome.
func exitOf(o agent.Outcome) exitCode {
	code, ok := callExit[o.Kind]
	switch {
	case !ok:
		return 1
	case o.Kind == agent.Failed && o.Unfinished:
		return exitFailedForNow
	}
	return code
}

// callView is the printed outcome: the body inline when it is JSON, and
// the approval the gateway named, when it named one.
func callView(o agent.Outcome) map[string]any {
	v := map[string]any{"kind": o.Kind, "intent": o.Intent, "version": o.Version, "key": o.Key,
		"operation_id": o.OperationID, "status": o.Status, "attempts": o.Attempts, "sent": o.Sent,
		"reason": o.Reason, "unfinished": o.Unfinished}
	if o.Approval != nil {
		v["approval"] = o.Approval
	}
	if json.Valid(o.Body) {
		v["body"] = json.RawMessage(o.Body)
	} else if len(o.Body) > 0 {
		v["body"] = string(o.Body)
	}
	return v
}

// stepped adds the workflow and the step to a printed view, when --step
// named one, so that a script reads them without parsing the intent.
func (f *callFlags) stepped(v map[string]any) map[string]any {
	if f.step != "" {
		v["workflow"], v["step"] = f.intent, f.step
	}
	return v
}

// readData reads -d: inline JSON, @FILE, or @- for stdin.
func readData(d string, stdin io.Reader) ([]byte, error) {
	switch {
	case d == "@-":
		return io.ReadAll(io.LimitReader(stdin, 1<<20+1))
	case strings.HasPrefix(d, "@"):
		b, err := os.ReadFile(d[1:])
		if err != nil {
			return nil, fmt.Errorf("-d: %w", err)
		}
		return b, nil
	}
	return []byte(d), nil
}

// exitWith prints err and exits with code.
func exitWith(cmd *cobra.Command, code int, err error) error {
	fmt.Fprintln(cmd.ErrOrStderr(), "idemgate:", err)
	return exitCode(code)
}

func newCallStatusCmd() *cobra.Command {
	var f callFlags
	cmd := &cobra.Command{
		Use:   "status --intent NAME [--step STEP] [--journal FILE] [--gateway URL]",
		Short: "Show what the journal and the gateway know of an intent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			intent, err := f.target()
			if err != nil {
				return exitWith(cmd, 2, err)
			}
			c, err := f.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Journal.Close()
			st, err := c.Status(cmd.Context(), intent)
			if err != nil {
				return err
			}
			return writeJSON(cmd.OutOrStdout(), f.stepped(statusView(st)))
		},
	}
	f.add(cmd)
	return cmd
}

// statusView is what call status prints: the intent's kind and why, in the
// words of call's own outcome, then the journal's entry and the gateway's
// view of the operation.
func statusView(st agent.Status) map[string]any {
	o := st.Outcome()
	kind := string(o.Kind)
	if kind == "" {
		kind = "unrecorded" // never sent, or its answer never recorded (see sent)
	}
	v := map[string]any{"kind": kind, "sent": o.Sent, "reason": o.Reason, "unfinished": o.Unfinished,
		"journal": st.Entry}
	if o.Approval != nil {
		v["approval"] = o.Approval
	}
	if st.Operation != nil {
		v["operation"] = st.Operation
	}
	return v
}
