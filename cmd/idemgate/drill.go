package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/drill"
)

// exitFound is the exit status of a drill whose check failed: it found a
// duplicate effect, a lost answer, a silent replay of a changed payload or
// another finding.
const exitFound = exitCode(1)

func newDrillCmd() *cobra.Command {
	var scenario, target, junit string
	var only []string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "drill --scenario FILE [--target URL] [--only ID,...] [--json] [--junit FILE]",
		Short: "Grade any HTTP API's retry safety with the articles' production checks",
		Long: `drill runs the disputed-write checks against the target a scenario file names (or
--target), with or without idemgate in front of it, through a built-in fault proxy that
loses answers after the write was applied, replaces them with a 500, resets before anything
is delivered, answers 429 with Retry-After, and delays. Each check (the workflow article's
12 tests, wf-1 to wf-12, the agent article's 5, and a status and a concurrency check) is
judged by the effects the target performed, counted by the scenario's GET and CEL
expression, not by the HTTP answers. A check that cannot apply is reported as not
applicable, with the reason; it is never passed. It prints a table (or, with --json, one
JSON object), writes JUnit XML with --junit, and exits 1 when a check failed: a duplicate
effect, a lost answer, a silent replay of a changed payload, or another finding.

A scenario whose top level is mcp: drills an MCP server's write tool instead (straight to the
server, or through idemgate's MCP proxy at /mcp/{name}): a lost response then a retry,
concurrent copies of one call, arguments changed under one intent, and an agent restarted
between attempts, each judged by the effects a read-only tool or a GET counts.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if data, err := os.ReadFile(scenario); err == nil && drill.IsMCPScenario(data) {
				return runMCPDrill(cmd, scenario, target, asJSON, junit)
			}
			s, err := drill.LoadScenario(scenario)
			if err != nil {
				return err
			}
			if target != "" {
				s.Target = target
			}
			r := &drill.Runner{Scenario: s, Only: only}
			return runDrill(cmd, r.Run, s.Target, asJSON, junit)
		},
	}
	cmd.Flags().StringVar(&scenario, "scenario", "", "the scenario file (required)")
	cmd.Flags().StringVar(&target, "target", "", "the target's base URL, instead of the scenario's")
	cmd.Flags().StringSliceVar(&only, "only", nil, "run only these checks, by id (wf-5,status)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as one JSON object")
	cmd.Flags().StringVar(&junit, "junit", "", "also write the report as JUnit XML to this file")
	_ = cmd.MarkFlagRequired("scenario")
	return cmd
}

// runMCPDrill runs an MCP scenario (its file's top level has mcp:): an
// agent's retries of a tool call, straight to an MCP server or through
// the proxy.
func runMCPDrill(cmd *cobra.Command, path, target string, asJSON bool, junit string) error {
	s, err := drill.LoadMCPScenario(path)
	if err != nil {
		return err
	}
	if target != "" {
		s.Target = target
	}
	r := &drill.MCPRunner{Scenario: s}
	return runDrill(cmd, r.Run, s.Target, asJSON, junit)
}

func runDrill(cmd *cobra.Command, run func(context.Context) ([]drill.Result, error), target string, asJSON bool,
	junit string) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Minute)
	defer cancel()
	results, err := run(ctx)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if asJSON {
		err = drill.WriteJSON(out, target, results)
	} else {
		err = drill.WriteTable(out, results)
	}
	if err == nil && junit != "" {
		err = writeJUnit(junit, target, results)
	}
	if err != nil {
		return err
	}
	if drill.Failed(results) {
		return exitFound
	}
	return nil
}

func writeJUnit(path, target string, results []drill.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("junit: %w", err)
	}
	if err := drill.WriteJUnit(f, target, results); err != nil {
		f.Close()
		return fmt.Errorf("junit: %w", err)
	}
	return errors.Join(f.Close())
}
