// The Vercel AI SDK (the real `ai` package), driven by its own test model
// (MockLanguageModelV3 from ai/test) scripted to call a tool, fail, retry,
// re-plan and resume; effects counted at the local upstream.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { generateText, stepCountIs, tool } from 'ai';
import { MockLanguageModelV3 } from 'ai/test';
import { z } from 'zod';
import { idempotentTool } from '@idemgate/client/ai';
import * as h from './harness.js';
import { suite } from './frameworks.js';

const CHILD = path.join(h.HERE, 'children', 'ai-agent.mjs');
const usage = { inputTokens: { total: 1, noCache: 1, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 1, text: 1, reasoning: 0 } };
let calls = 0;
const callTool = (name, input) => ({
  content: [{ type: 'tool-call', toolCallId: `call_${++calls}`, toolName: name, input: JSON.stringify(input) }],
  finishReason: { unified: 'tool-calls', raw: 'tool_calls' }, usage, warnings: [],
});
const say = (text) => ({ content: [{ type: 'text', text }], finishReason: { unified: 'stop', raw: 'stop' }, usage, warnings: [] });

/** A model that plays steps in order: each a response, or an Error to throw. */
function scripted(steps) {
  let i = 0;
  return new MockLanguageModelV3({
    doGenerate: async () => {
      const s = steps[i++];
      if (s instanceof Error) throw s;
      if (!s) throw new Error('the script ran out');
      return s;
    },
  });
}

const toolErrors = (r) => r.steps.flatMap((s) => s.content).filter((p) => p.type === 'tool-error').map((p) => p.error);
const toolResults = (r) => r.steps.flatMap((s) => s.content).filter((p) => p.type === 'tool-result').map((p) => p.output);

describe('Vercel AI SDK: idempotentTool', () => {
  let s;
  before(async (t) => { s = await suite(t); });
  after(async () => { await s?.close(); });

  for (const mode of ['action', 'request']) {
    const ticketTool = (client, run, tag, extra = {}) => idempotentTool(client, tool({
      description: 'Create a ticket',
      inputSchema: z.object({ title: z.string() }),
      execute: async (input) => h.effect(s.up.url, tag, input),
    }), mode === 'action'
      ? { name: 'createTicket', action: 'ticket.create', run, ...extra }
      : { name: 'createTicket', request: (input) => ({ path: `/v1/effects/${tag}`, body: input }), run, ...extra });

    test(`${mode}: a retry after a lost answer makes one effect`, async () => {
      const tag = h.tag(`ai-retry-${mode}`);
      const client = s.client();
      const tools = { createTicket: ticketTool(client, `chat-${tag}`, tag) };
      // The tool runs, then the provider times out before the model saw its answer: the run fails.
      const timeout = Object.assign(new Error('provider timed out'), { name: 'AI_APICallError' });
      await assert.rejects(generateText({ model: scripted([callTool('createTicket', { title: 'Disk full' }), timeout]), tools, prompt: 'x', stopWhen: stepCountIs(5), maxRetries: 0 }), /timed out/);
      assert.equal(s.up.count(tag), 1);
      // The app retries the run: the model calls the tool again, with a new tool call id.
      const r = await generateText({ model: scripted([callTool('createTicket', { title: 'Disk full' }), say('done')]), tools, prompt: 'x', stopWhen: stepCountIs(5), maxRetries: 0 });
      assert.equal(r.text, 'done');
      assert.equal(toolResults(r)[0].id, `eff_${tag}_1`);
      assert.equal(s.up.count(tag), 1);
    });

    test(`${mode}: a re-plan with the same input in the same run makes one effect`, async () => {
      const tag = h.tag(`ai-replan-${mode}`);
      const tools = { createTicket: ticketTool(s.client(), `chat-${tag}`, tag) };
      const r = await generateText({
        model: scripted([callTool('createTicket', { title: 'Disk full' }), callTool('createTicket', { title: 'Disk full' }), say('done')]),
        tools, prompt: 'x', stopWhen: stepCountIs(5),
      });
      assert.deepEqual(toolErrors(r), []);
      const results = toolResults(r);
      assert.equal(results.length, 2);
      assert.deepEqual(results[1], { id: `eff_${tag}_1`, n: 1, tag });
      assert.equal(s.up.count(tag), 1);
    });

    test(`${mode}: a changed input under the same intent is refused, and nothing is sent`, async () => {
      const tag = h.tag(`ai-changed-${mode}`);
      const tools = { createTicket: ticketTool(s.client(), `chat-${tag}`, tag, { intent: () => 'the-incident-ticket' }) };
      const r = await generateText({
        model: scripted([callTool('createTicket', { title: 'Disk full' }), callTool('createTicket', { title: 'Disk almost full' }), say('done')]),
        tools, prompt: 'x', stopWhen: stepCountIs(5),
      });
      const errors = toolErrors(r);
      assert.equal(errors.length, 1);
      assert.equal(errors[0].code, 'payload_changed');
      assert.equal(s.up.count(tag), 1);
      assert.deepEqual(JSON.parse(s.up.bodies.get(tag)[0]), { title: 'Disk full' });
    });
  }

  test('action: an approval-gated tool waits, and runs once after a second principal approves', async () => {
    const tag = h.tag('ai-approval');
    const client = s.client();
    const refund = idempotentTool(client, tool({
      description: 'Refund a customer',
      inputSchema: z.object({ amount: z.number(), customer: z.string() }),
      needsApproval: true,
      execute: async (input) => h.effect(s.up.url, tag, input),
    }), { name: 'refund', action: 'refund.issue', run: `chat-${tag}`, approvalWait: 120_000 });
    assert.equal(refund.needsApproval, undefined); // decided in idemgate, not in the app
    const model = scripted([callTool('refund', { amount: 1500, customer: tag }), callTool('refund', { amount: 1500, customer: tag }), say('done')]);
    const running = generateText({ model, tools: { refund }, prompt: 'x', stopWhen: stepCountIs(5) });
    const ap = await s.gw.pendingApproval();
    assert.equal(ap.summary, `Refund 1500 to ${tag}`);
    assert.equal(s.up.count(tag), 0);
    assert.equal((await s.gw.approve(ap.id, 'agent-token')).status, 403); // not the requester
    assert.equal((await s.gw.approve(ap.id)).status, 200);
    const r = await running;
    assert.deepEqual(toolErrors(r), []);
    assert.equal(toolResults(r).length, 2);
    assert.equal(s.up.count(tag), 1);
  });

  test('action: needsApproval on an action that asks for none is refused, and nothing runs', async () => {
    const tag = h.tag('ai-ungated');
    const t = idempotentTool(s.client(), tool({
      description: 'Send', inputSchema: z.object({ to: z.string() }), needsApproval: async (input) => input.to === 'all',
      execute: async (input) => h.effect(s.up.url, tag, input),
    }), { name: 'send', action: 'reply.send', run: `chat-${tag}` });
    const r = await generateText({ model: scripted([callTool('send', { to: 'all' }), callTool('send', { to: 'bob' }), say('ok')]), tools: { send: t }, prompt: 'x', stopWhen: stepCountIs(5) });
    assert.deepEqual(toolErrors(r).map((e) => e.code), ['approval_not_configured']);
    assert.equal(s.up.count(tag), 1); // bob's, which needs no approval
  });

  test('request: SIGKILL of the Node process after the effect, before the SDK recorded it; the resume makes no second effect', async () => {
    const tag = h.tag('ai-kill');
    const journal = path.join(h.tempdir(), 'journal.jsonl');
    const messages = path.join(h.tempdir(), 'messages.json');
    const hold = s.up.hold(tag);
    const args = JSON.stringify({ url: s.gw.url, journal, messages, tag, run: `chat-${tag}` });
    const w = h.child(CHILD, [args]);
    await hold.arrived; // the effect is done at the upstream; its answer is held
    await w.kill9();
    hold.release();
    assert.equal(fs.existsSync(messages), false); // the SDK never recorded the step
    // The resume: a new process runs the same chat again.
    const again = h.child(CHILD, [args]);
    const done = await again.until('done');
    await again.exited;
    assert.equal(done.result.id, `eff_${tag}_1`);
    assert.equal(s.up.count(tag), 1);
  });
});
