// An upstream MCP server written with the official TypeScript SDK, over
// stdio, that counts its effects: each create_ticket appends a line to the
// file named by its first argument, and count_effects (read-only) says
// how many there are. The MCP proxy starts it (cmd/internal/server's
// TestMCPTypeScriptClient and TestMCPInspectorCLI).
import { appendFileSync, existsSync, readFileSync } from "node:fs";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { z } from "zod";

const effects = process.argv[2];
const count = () => (existsSync(effects) ? readFileSync(effects, "utf8").split("\n").length - 1 : 0);

const server = new McpServer({ name: "ts-counter", version: "1.0.0" });
server.registerTool(
  "create_ticket",
  { description: "Create a ticket (a write).", inputSchema: { title: z.string(), ms: z.number().optional() } },
  async ({ title, ms }) => {
    if (ms) await new Promise((r) => setTimeout(r, ms));
    appendFileSync(effects, JSON.stringify({ tool: "create_ticket", title }) + "\n");
    const n = count();
    return { content: [{ type: "text", text: `created T-${n}` }], structuredContent: { id: `T-${n}` } };
  },
);
server.registerTool(
  "count_effects",
  { description: "How many effects there are.", inputSchema: {}, annotations: { readOnlyHint: true } },
  async () => ({ content: [{ type: "text", text: String(count()) }] }),
);
await server.connect(new StdioServerTransport());
