package main

import (
	"runtime/debug"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/mcpserver"
)

// version is idemgate's, when the build sets it (make build does):
//
//	go build -ldflags "-X main.version=v1.4.0" ./cmd/idemgate
//
// Empty, buildVersion reads it from the binary's build information.
var version string

// buildVersion is the version this binary reports (idemgate mcp's
// serverInfo, which clients show and log): a name a user can trace to
// the code, never a placeholder.
func buildVersion() string {
	info, _ := debug.ReadBuildInfo()
	return versionOf(version, info)
}

// versionOf is the version the build set, else the module's (go install
// MODULE@VERSION records it), else the commit the build recorded (with
// "+dirty" for uncommitted changes: devel-0123456789ab+dirty), else
// "(devel)", Go's own word for a build of unversioned source.
func versionOf(set string, info *debug.BuildInfo) string {
	if set != "" {
		return set
	}
	if info == nil {
		return "(devel)"
	}
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, dirty string
	for _, s := range info.Settings {
		switch {
		case s.Key == "vcs.revision" && len(s.Value) >= 12:
			rev = s.Value[:12]
		case s.Key == "vcs.modified" && s.Value == "true":
			dirty = "+dirty"
		}
	}
	if rev == "" {
		return "(devel)"
	}
	return "devel-" + rev + dirty
}

func newMCPCmd() *cobra.Command {
	var f callFlags
	cmd := &cobra.Command{
		Use:   "mcp [--journal FILE] [--gateway URL] [--run ID]",
		Short: "Serve the agent client to a model as MCP tools, over stdio",
		Long: `mcp is an MCP server on stdin/stdout with three tools: submit_write (one write per
intent, retried safely), operation_status and list_operations. Intents and their
keys live in the journal, as with idemgate call. submit_write and
operation_status take an optional step: the write is then one step of the
workflow the intent names, run as the intent INTENT/STEP with its own key, as
idemgate call --step and the Go client's RunWorkflow run it. The server names
intents: each one it hands out carries a seal (a MAC under the agent's secret,
see idemgate call --help), and a name it never handed out is refused, nothing
sent. The gateway token is read from
IDEMGATE_TOKEN and never shown to the model; the gateway URL comes from
--gateway or IDEMGATE_URL. Every request names the agent run (Idempotency-Run,
recorded by the gateway's audit log): --run ID, else a run made for this server
process.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := f.client(cmd.Context())
			if err != nil {
				return err
			}
			defer c.Journal.Close()
			return mcpserver.New(c, buildVersion()).Run(cmd.Context(), &mcp.StdioTransport{})
		},
	}
	f.addCommon(cmd)
	f.addRun(cmd)
	return cmd
}
