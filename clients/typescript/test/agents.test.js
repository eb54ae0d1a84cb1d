// The OpenAI Agents SDK (the real @openai/agents), driven by a scripted
// Model of its own interface (no model service): a tool called, failed,
// retried, re-planned and resumed, a RunState saved and resumed in
// another process; effects counted at the local upstream.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { Agent, Usage, run, setTracingDisabled, tool } from '@openai/agents';
import { z } from 'zod';
import { idempotentTool } from '@idemgate/client/openai-agents';
import * as h from './harness.js';
import { suite } from './frameworks.js';

setTracingDisabled(true);
const APP = path.join(h.HERE, 'children', 'agents-app.mjs');
let ids = 0;
const callTool = (name, args) => [{ type: 'function_call', id: `fc_${++ids}`, callId: `call_${ids}`, name, status: 'completed', arguments: JSON.stringify(args) }];
const say = (text) => [{ type: 'message', id: `m_${++ids}`, role: 'assistant', status: 'completed', content: [{ type: 'output_text', text }] }];

/** A Model that plays its turns in order: each the output items, or an Error to throw. */
function scripted(turns) {
  let i = 0;
  return {
    async getResponse() {
      const t = turns[i++];
      if (t instanceof Error) throw t;
      if (!t) throw new Error('the script ran out');
      return { usage: new Usage(), output: t, responseId: `resp_${++ids}` };
    },
    async *getStreamedResponse() { throw new Error('not streamed'); },
  };
}

const text = (o) => (typeof o === 'string' ? o : JSON.stringify(o));
const outputs = (r) => r.newItems.filter((i) => i.type === 'tool_call_output_item').map((i) => i.output);

describe('OpenAI Agents SDK: idempotentTool', () => {
  let s;
  before(async (t) => { s = await suite(t); });
  after(async () => { await s?.close(); });

  for (const mode of ['action', 'request']) {
    const ticketTool = (client, tag, extra = {}) => tool(idempotentTool(client, {
      name: 'create_ticket', description: 'Create a ticket', parameters: z.object({ title: z.string() }),
      execute: async (input) => JSON.stringify(await h.effect(s.up.url, tag, input)),
    }, mode === 'action'
      ? { action: 'ticket.create', run: (ctx) => ctx.context.conversation, ...extra }
      : { request: (input) => ({ path: `/v1/effects/${tag}`, body: input }), run: (ctx) => ctx.context.conversation, ...extra }));
    const agentWith = (t, model) => new Agent({ name: 'ops', instructions: 'Open tickets.', model, tools: [t] });

    test(`${mode}: a retry after a lost answer makes one effect`, async () => {
      const tag = h.tag(`agents-retry-${mode}`);
      const t = ticketTool(s.client(), tag);
      const context = { conversation: `conv-${tag}` };
      // The tool runs, then the model's next turn times out: the run fails before the model read the answer.
      await assert.rejects(run(agentWith(t, scripted([callTool('create_ticket', { title: 'Disk full' }), new Error('model timed out')])), 'disk full', { context }), /timed out/);
      assert.equal(s.up.count(tag), 1);
      const r = await run(agentWith(t, scripted([callTool('create_ticket', { title: 'Disk full' }), say('done')])), 'disk full', { context });
      assert.equal(r.finalOutput, 'done');
      assert.match(text(outputs(r)[0]), new RegExp(`eff_${tag}_1`));
      assert.equal(s.up.count(tag), 1);
    });

    test(`${mode}: a re-plan with the same input in the same run makes one effect`, async () => {
      const tag = h.tag(`agents-replan-${mode}`);
      const t = ticketTool(s.client(), tag);
      const r = await run(agentWith(t, scripted([callTool('create_ticket', { title: 'Disk full' }), callTool('create_ticket', { title: 'Disk full' }), say('done')])),
        'disk full', { context: { conversation: `conv-${tag}` } });
      const out = outputs(r);
      assert.equal(out.length, 2);
      assert.match(text(out[1]), new RegExp(`eff_${tag}_1`));
      assert.equal(s.up.count(tag), 1);
    });

    test(`${mode}: a changed input under the same intent is refused, and nothing is sent`, async () => {
      const tag = h.tag(`agents-changed-${mode}`);
      const t = ticketTool(s.client(), tag, { intent: () => 'the-incident-ticket' });
      const r = await run(agentWith(t, scripted([callTool('create_ticket', { title: 'Disk full' }), callTool('create_ticket', { title: 'Disk almost full' }), say('done')])),
        'disk full', { context: { conversation: `conv-${tag}` } });
      const out = outputs(r);
      assert.equal(out.length, 2);
      assert.match(String(out[1]), /error/i); // the SDK's model-visible error for the refused call
      assert.equal(s.up.count(tag), 1);
      assert.deepEqual(JSON.parse(s.up.bodies.get(tag)[0]), { title: 'Disk full' });
    });
  }

  test('request: an approval-gated tool interrupts the run; a RunState resumed in other processes runs it once after a second principal approves', async () => {
    const tag = h.tag('agents-approval');
    const args = { url: s.gw.url, journal: path.join(h.tempdir(), 'journal.jsonl'), state: path.join(h.tempdir(), 'state.json'), tag, conversation: `conv-${tag}`, gated: true };
    const first = h.child(APP, [JSON.stringify({ ...args, step: 'start' })]);
    assert.deepEqual((await first.until('interrupted')).tools, ['create_ticket']);
    await first.exited;
    assert.equal(s.up.count(tag), 0);
    // Resumed before anyone decided: still interrupted, nothing sent.
    const early = h.child(APP, [JSON.stringify({ ...args, step: 'resume' })]);
    await early.until('interrupted');
    await early.exited;
    const ap = await s.gw.pendingApproval();
    assert.equal((await s.gw.approve(ap.id, 'agent-token')).status, 403);
    assert.equal((await s.gw.approve(ap.id)).status, 200);
    const resumed = h.child(APP, [JSON.stringify({ ...args, step: 'resume' })]);
    const done = await resumed.until('done');
    await resumed.exited;
    assert.match(text(done.output), new RegExp(`eff_${tag}_1`));
    assert.equal(s.up.count(tag), 1);
  });

  test('request: SIGKILL of the Node process after the effect, before the SDK recorded it; the resumed RunState makes no second effect', async () => {
    const tag = h.tag('agents-kill');
    const args = { url: s.gw.url, journal: path.join(h.tempdir(), 'journal.jsonl'), state: path.join(h.tempdir(), 'state.json'), tag, conversation: `conv-${tag}`, gated: true };
    const first = h.child(APP, [JSON.stringify({ ...args, step: 'start' })]);
    await first.until('interrupted');
    await first.exited;
    const ap = await s.gw.pendingApproval();
    assert.equal((await s.gw.approve(ap.id)).status, 200);
    const hold = s.up.hold(tag);
    const doomed = h.child(APP, [JSON.stringify({ ...args, step: 'resume' })]);
    await hold.arrived; // the effect is done; its answer is held
    await doomed.kill9();
    hold.release();
    // The same saved state, resumed in a new process.
    const resumed = h.child(APP, [JSON.stringify({ ...args, step: 'resume' })]);
    const done = await resumed.until('done');
    await resumed.exited;
    assert.match(text(done.output), new RegExp(`eff_${tag}_1`));
    assert.equal(s.up.count(tag), 1);
  });
});
