// An app built on the OpenAI Agents SDK (its core package, @openai/agents-core,
// which @openai/agents re-exports: half the start-up time of a child) that the tests run and kill as
// separate processes: a scripted Model (no model service) calls one tool;
// a run interrupted for an approval saves its RunState to a file, and a
// later process resumes it from there. One JSON line per event on stdout.
//
// argv: JSON {url, journal, state, tag, conversation, step, gated}.
//   step "start":  run the conversation; on an interruption, save the state.
//   step "resume": load the saved state and run it again.

import fs from 'node:fs';
import { Agent, RunState, Usage, run, setTracingDisabled, tool } from '@openai/agents-core';
import { z } from 'zod';
import { Client } from '@idemgate/client';
import { idempotentTool } from '@idemgate/client/openai-agents';

setTracingDisabled(true);
const a = JSON.parse(process.argv[2]);
const say = (event, extra = {}) => process.stdout.write(JSON.stringify({ event, ...extra }) + '\n');
const client = new Client({ url: a.url, token: 'agent-token', journal: a.journal });

let turn = 0;
const model = {
  async getResponse() {
    const t = turn++;
    const output = t === 0
      ? [{ type: 'function_call', id: `fc_${process.pid}`, callId: `call_${process.pid}`, name: 'create_ticket', status: 'completed', arguments: JSON.stringify({ title: 'Disk full' }) }]
      : [{ type: 'message', id: `m_${process.pid}_${t}`, role: 'assistant', status: 'completed', content: [{ type: 'output_text', text: 'done' }] }];
    return { usage: new Usage(), output, responseId: `r_${process.pid}_${t}` };
  },
  async *getStreamedResponse() { throw new Error('not streamed'); },
};
const path = a.gated ? `/v1/gated/${a.tag}` : `/v1/effects/${a.tag}`;
const createTicket = tool(idempotentTool(client, {
  name: 'create_ticket', description: 'Create a ticket', parameters: z.object({ title: z.string() }),
  needsApproval: !!a.gated, execute: async () => 'unused: the gateway performs it',
}, { request: (input) => ({ path, body: input }), run: (ctx) => ctx.context.conversation }));
const agent = new Agent({ name: 'ops', instructions: 'Open tickets.', model, tools: [createTicket] });

let result;
if (a.step === 'start') {
  result = await run(agent, 'the disk is full', { context: { conversation: a.conversation } });
} else {
  const state = await RunState.fromString(agent, fs.readFileSync(a.state, 'utf8'));
  result = await run(agent, state);
}
if (result.interruptions && result.interruptions.length) {
  fs.writeFileSync(a.state, result.state.toString());
  say('interrupted', { tools: result.interruptions.map((i) => i.rawItem.name) });
} else {
  const out = result.newItems.find((i) => i.type === 'tool_call_output_item');
  say('done', { output: out && out.output, final: result.finalOutput });
}
await client.close();
