// The official TypeScript SDK's client, through the MCP proxy: it lists
// the tools, calls one intent twice, changes its arguments, calls another
// intent twenty times at once, and forgets the intent, printing what it
// saw as one JSON object (cmd/internal/server's TestMCPTypeScriptClient).
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const connect = async () => {
  const client = new Client({ name: "ts-agent", version: "1.0.0" });
  await client.connect(new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  }));
  return client;
};
const seen = (r) => ({ isError: !!r.isError, meta: r._meta ?? {}, structured: r.structuredContent ?? null,
  text: (r.content ?? []).map((c) => c.text ?? "").join("") });

const client = await connect();
const out = {};
const { tools } = await client.listTools();
const create = tools.find((t) => t.name === "create_ticket");
out.intentRequired = create.inputSchema.required.includes("intent");
out.tools = tools.map((t) => t.name).sort();
const args = { intent: "ts ticket", title: "from TypeScript" };
out.first = seen(await client.callTool({ name: "create_ticket", arguments: args }));
out.again = seen(await client.callTool({ name: "create_ticket", arguments: args }));
out.changed = seen(await client.callTool({ name: "create_ticket", arguments: { ...args, title: "other" } }));
out.noIntent = seen(await client.callTool({ name: "create_ticket", arguments: { title: "x" } }).catch((e) => ({ isError: true, _meta: { error: String(e) } })));
const storm = await Promise.all(Array.from({ length: 20 }, async () => {
  const c = await connect();
  const r = await c.callTool({ name: "create_ticket", arguments: { intent: "ts storm", title: "s", ms: 200 } });
  await c.close();
  return r.isError ? r._meta["io.idemgate/code"] : "ok";
}));
out.storm = storm;
out.count = seen(await client.callTool({ name: "count_effects", arguments: {} })).text;
await client.close();
console.log(JSON.stringify(out));
