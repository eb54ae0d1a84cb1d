// The Vercel AI SDK with idemgate: a createTicket tool through the gateway.
// The model (the SDK's own MockLanguageModelV3, scripted: no model service)
// calls the tool, re-plans and calls it again with the same input, and
// then the app retries the whole run after losing its answer: the ops API
// creates one ticket.
//
//   npm ci --prefix examples/typescript && node examples/typescript/vercel-ai.mjs

import { generateText, stepCountIs, tool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';
import { idempotentTool } from '@idemgate/client/ai';
import { RUN, client, ticketsCreated } from './common.mjs';

const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
let id = 0;
const call = (input) => ({ content: [{ type: 'tool-call', toolCallId: `call_${++id}`, toolName: 'createTicket', input: JSON.stringify(input) }], finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage, warnings: [] });
const text = (t) => ({ content: [{ type: 'text', text: t }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] });
const model = (steps) => new MockLanguageModelV3({ doGenerate: async () => steps.shift() });

const idem = client();
const createTicket = idempotentTool(idem, tool({
  description: 'Open a ticket in the ops tracker',
  inputSchema: z.object({ project: z.string(), title: z.string(), priority: z.number().int() }),
}), {
  name: 'createTicket',
  request: (input) => ({ method: 'POST', path: '/v1/tickets', body: input }), // the gateway performs it, once
  run: RUN, // the app's chat id: the key is this run, the tool and its input; never the model's call id
});

const input = { project: 'OPS', title: 'Disk full on db-1', priority: 2 };
const before = await ticketsCreated();
// 1. The model calls the tool, then re-plans and calls it again with the same input.
const first = await generateText({ model: model([call(input), call(input), text('Ticket opened.')]), tools: { createTicket }, prompt: 'db-1 disk is full', stopWhen: stepCountIs(5) });
const results = first.steps.flatMap((s) => s.content).filter((p) => p.type === 'tool-result').map((p) => p.output.id);
// 2. The app lost that answer and runs the chat again: the tool is called once more.
await generateText({ model: model([call(input), text('Ticket opened.')]), tools: { createTicket }, prompt: 'db-1 disk is full', stopWhen: stepCountIs(5) });
const made = (await ticketsCreated()) - before;
console.log(`tool calls: 3 (ids ${results.join(', ')} and a retry); tickets created: ${made}`);
await idem.close();
process.exit(made === 1 ? 0 : 1);
