package main

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/idemgate/idemgate/mcpserver"
)

// version is idemgate's, as the MCP server announces it.
var version = "dev"

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
idemgate call --step and the Go client's RunWorkflow run it. The gateway token is read from
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
			return mcpserver.New(c, version).Run(cmd.Context(), &mcp.StdioTransport{})
		},
	}
	f.addCommon(cmd)
	f.addRun(cmd)
	return cmd
}
