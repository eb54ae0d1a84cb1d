// An app built on the Vercel AI SDK that the tests kill: one chat whose
// scripted model calls createTicket (a request through the gateway), the
// messages saved after each step. It prints {"event":"done"} at the end.

import fs from 'node:fs';
import { generateText, stepCountIs, tool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';
import { Client } from '@idemgate/client';
import { idempotentTool } from '@idemgate/client/ai';

const a = JSON.parse(process.argv[2]);
const client = new Client({ url: a.url, token: 'agent-token', journal: a.journal });
const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
let step = 0;
const model = new MockLanguageModelV3({
  doGenerate: async () => (step++ === 0
    ? { content: [{ type: 'tool-call', toolCallId: `call_${process.pid}`, toolName: 'createTicket', input: '{"title":"Disk full"}' }], finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage, warnings: [] }
    : { content: [{ type: 'text', text: 'done' }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] }),
});
const createTicket = idempotentTool(client, tool({
  description: 'Create a ticket', inputSchema: z.object({ title: z.string() }),
}), { name: 'createTicket', request: (input) => ({ path: `/v1/effects/${a.tag}`, body: input }), run: a.run });
const r = await generateText({
  model, tools: { createTicket }, prompt: 'the disk is full', stopWhen: stepCountIs(4),
  onStepFinish: (st) => fs.writeFileSync(a.messages, JSON.stringify(st.response.messages)),
});
const result = r.steps.flatMap((s) => s.content).find((p) => p.type === 'tool-result')?.output;
process.stdout.write(JSON.stringify({ event: 'done', result }) + '\n');
await client.close();
