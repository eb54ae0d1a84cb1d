package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemgate/idemgate/internal/scenarios"
)

// scenarioEnv is where the demo's acts play: its gateway and API, its
// principals, and this process as the CLI.
func (e *demoEnv) scenarioEnv() *scenarios.Env {
	return &scenarios.Env{GatewayURL: e.gwURL, APIURL: e.apiURL, AgentToken: demoAgentToken,
		OperatorToken: demoOperatorToken, ApproverToken: demoApproverToken, StoreDSN: e.storeDSN, Tenant: "demo",
		Dir: e.dir, AuditKey: filepath.Join(e.dir, demoKey+".pub"), Checkpoints: filepath.Join(e.dir, demoCheckpoints),
		CLI: cli, Out: e.out, TTY: e.tty}
}

// play plays acts (scenarios.Demo's, in the demo) and prints the table;
// it returns how many acts performed the wrong number of effects (or
// failed outright).
func (e *demoEnv) play(ctx context.Context, acts []scenarios.Act) int {
	start := time.Now()
	fmt.Fprintf(e.out, "idemgate demo: an agent writes through the gateway (%s) to an ops API that\n"+
		"ignores idempotency keys (%s). Effects are counted at the API.\n", e.gwURL, e.apiURL)
	s := scenarios.NewState(randomHex(3))
	s.AgentRun = "demo-agent-" + s.Run
	var rows [][]string
	failed := 0
	for _, o := range e.scenarioEnv().Play(ctx, s, acts) {
		verdict := "ok"
		if o.Err != nil {
			verdict, failed = "WRONG", failed+1
		}
		rows = append(rows, []string{o.Act.Action, fmt.Sprint(o.Requests), scenarios.Plural(o.Effects, o.Act.Unit),
			fmt.Sprint(o.Act.Expected), verdict})
	}
	printDemoTable(e.out, rows)
	fmt.Fprintf(e.out, "\n%d acts in %.1fs; %d wrong.\n", len(acts), time.Since(start).Seconds(), failed)
	return failed
}

func printDemoTable(out io.Writer, rows [][]string) {
	width := len("ACTION")
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	line := func(c ...string) {
		fmt.Fprintf(out, "  %-*s  %8s  %-12s  %8s  %s\n", width, c[0], c[1], c[2], c[3], c[4])
	}
	fmt.Fprintln(out)
	line("ACTION", "REQUESTS", "EFFECTS", "EXPECTED", "")
	for _, r := range rows {
		line(r...)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// cli runs an idemgate command in this process and returns its output.
func cli(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	root := newRoot()
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(io.Discard)
	if err := root.ExecuteContext(ctx); err != nil {
		return "", fmt.Errorf("idemgate %s: %w", strings.Join(args, " "), err)
	}
	return out.String(), nil
}
