// The OpenAI Agents SDK with idemgate: a create_ticket function tool
// through the gateway. A scripted Model (the SDK's own interface, no model
// service) calls the tool; the run is repeated as after a lost answer, and
// its RunState, serialized as an app would keep it, is resumed: the ops
// API creates one ticket.
//
//   npm ci --prefix examples/typescript && node examples/typescript/openai-agents.mjs

import { Agent, RunState, Usage, run, setTracingDisabled, tool } from '@openai/agents';
import { z } from 'zod';
import { idempotentTool } from '@idemgate/client/openai-agents';
import { RUN, client, ticketsCreated } from './common.mjs';

setTracingDisabled(true);
let id = 0;
const model = (turns) => ({
  async getResponse() {
    return { usage: new Usage(), output: turns.shift(), responseId: `r${++id}` };
  },
  async *getStreamedResponse() { throw new Error('not streamed'); },
});
const call = (args) => [{ type: 'function_call', id: `fc${++id}`, callId: `call_${id}`, name: 'create_ticket', status: 'completed', arguments: JSON.stringify(args) }];
const say = (t) => [{ type: 'message', id: `m${++id}`, role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: t }] }];

const idem = client();
const createTicket = tool(idempotentTool(idem, {
  name: 'create_ticket', description: 'Open a ticket in the ops tracker',
  parameters: z.object({ project: z.string(), title: z.string(), priority: z.number().int() }),
  execute: async () => 'unused: the gateway performs the request',
}, {
  request: (input) => ({ method: 'POST', path: '/v1/tickets', body: input }),
  run: (ctx) => ctx.context.conversationId, // travels in a saved RunState
}));
const agentWith = (m) => new Agent({ name: 'ops', instructions: 'Open tickets.', model: m, tools: [createTicket] });

const input = { project: 'OPS', title: 'Certificate expires on api-2', priority: 2 };
const context = { conversationId: RUN };
const before = await ticketsCreated();
const first = await run(agentWith(model([call(input), say('Opened.')])), 'api-2 cert expires', { context });
// The app repeats the run (its answer was lost): the model calls the tool again, with a new call id.
await run(agentWith(model([call(input), say('Opened.')])), 'api-2 cert expires', { context });
// And a state saved mid-run, resumed in another process, keeps the same key.
const saved = first.state.toString();
const state = await RunState.fromString(agentWith(model([call(input), say('Opened.')])), saved);
console.log(`saved RunState: ${saved.length} bytes, conversation ${state._context.context.conversationId}`);
const made = (await ticketsCreated()) - before;
console.log(`runs: 2, tool calls: 2; tickets created: ${made}`);
await idem.close();
process.exit(made === 1 ? 0 : 1);
