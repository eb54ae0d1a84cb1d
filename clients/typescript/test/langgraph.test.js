// LangGraph (the real @langchain/langgraph): nodes whose effects go
// through idempotentEffect, retried by LangGraph's retry policy,
// re-planned by a loop, interrupted after the effect and resumed from
// the checkpoint, and resumed in a new process after a SIGKILL; effects
// counted at the local upstream. The "model" is a plain node (no model
// service): the cases are about the graph's re-runs.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { Annotation, Command, END, MemorySaver, START, StateGraph, interrupt } from '@langchain/langgraph';
import { Conflict } from '@idemgate/client';
import { idempotentEffect } from '@idemgate/client/langgraph';
import * as h from './harness.js';
import { suite } from './frameworks.js';

const APP = path.join(h.HERE, 'children', 'langgraph-app.mjs');
const State = Annotation.Root({ title: Annotation(), ticket: Annotation(), visits: Annotation(), answer: Annotation() });
const thread = (tag) => ({ configurable: { thread_id: `thread-${tag}` } });

describe('LangGraph: idempotentEffect', () => {
  let s;
  before(async (t) => { s = await suite(t); });
  after(async () => { await s?.close(); });

  for (const mode of ['action', 'request']) {
    const effectFor = (client, tag, extra = {}) => idempotentEffect(client, mode === 'action'
      ? { name: 'create-ticket', action: 'ticket.create', ...extra }
      : { name: 'create-ticket', request: (t) => ({ path: `/v1/effects/${tag}`, body: t }), ...extra },
    (t) => h.effect(s.up.url, tag, t));

    test(`${mode}: a retry after a lost answer makes one effect`, async () => {
      const tag = h.tag(`lg-retry-${mode}`);
      const createTicket = effectFor(s.client(), tag);
      let lost = 0;
      const graph = new StateGraph(State)
        .addNode('act', async (state, config) => {
          const ticket = await createTicket({ title: state.title }, config);
          if (lost++ === 0) throw new Error('timed out reading the answer'); // the node lost it
          return { ticket };
        }, { retryPolicy: { maxAttempts: 3, initialInterval: 10, retryOn: () => true } })
        .addEdge(START, 'act').addEdge('act', END).compile({ checkpointer: new MemorySaver() });
      const out = await graph.invoke({ title: 'Disk full' }, thread(tag));
      assert.equal(lost, 2);
      assert.equal(out.ticket.id, `eff_${tag}_1`);
      assert.equal(s.up.count(tag), 1);
    });

    test(`${mode}: a re-plan with the same input in the same run makes one effect (scope 'task': one per visit)`, async () => {
      for (const scope of ['node', 'task']) {
        const tag = h.tag(`lg-replan-${mode}-${scope}`);
        const createTicket = effectFor(s.client(), tag, { scope });
        const graph = new StateGraph(State)
          .addNode('plan', (state) => ({ visits: (state.visits || 0) + 1 }))
          .addNode('act', async (state, config) => ({ ticket: await createTicket({ title: state.title }, config) }))
          .addEdge(START, 'plan')
          .addConditionalEdges('plan', (state) => (state.visits <= 2 ? 'act' : END))
          .addEdge('act', 'plan')
          .compile({ checkpointer: new MemorySaver() });
        const out = await graph.invoke({ title: 'Disk full' }, thread(tag));
        assert.equal(out.visits, 3);
        assert.equal(s.up.count(tag), scope === 'node' ? 1 : 2, scope);
      }
    });

    test(`${mode}: interrupted after the effect and resumed from its checkpoint, the node's re-run makes no second effect`, async () => {
      const tag = h.tag(`lg-interrupt-${mode}`);
      const createTicket = effectFor(s.client(), tag, { scope: 'task' });
      let runs = 0;
      const graph = new StateGraph(State)
        .addNode('act', async (state, config) => {
          runs++;
          const ticket = await createTicket({ title: state.title }, config);
          const answer = interrupt({ confirm: ticket.id });
          return { ticket, answer };
        })
        .addEdge(START, 'act').addEdge('act', END).compile({ checkpointer: new MemorySaver() });
      const first = await graph.invoke({ title: 'Disk full' }, thread(tag));
      assert.equal(first.__interrupt__[0].value.confirm, `eff_${tag}_1`);
      const out = await graph.invoke(new Command({ resume: 'yes' }), thread(tag));
      assert.deepEqual([runs, out.answer, out.ticket.id], [2, 'yes', `eff_${tag}_1`]);
      assert.equal(s.up.count(tag), 1);
    });

    test(`${mode}: a changed input under the same intent is refused, and nothing is sent`, async () => {
      const tag = h.tag(`lg-changed-${mode}`);
      const createTicket = effectFor(s.client(), tag, { intent: () => 'the-incident-ticket' });
      let runs = 0;
      const graph = new StateGraph(State)
        .addNode('act', async (state, config) => {
          // The node's input is not deterministic: its re-run asks for another ticket.
          const ticket = await createTicket({ title: runs++ === 0 ? state.title : `${state.title} (again)` }, config);
          return { ticket, answer: interrupt({ confirm: ticket.id }) };
        })
        .addEdge(START, 'act').addEdge('act', END).compile({ checkpointer: new MemorySaver() });
      await graph.invoke({ title: 'Disk full' }, thread(tag));
      await assert.rejects(graph.invoke(new Command({ resume: 'yes' }), thread(tag)), (e) => e instanceof Conflict && e.code === 'payload_changed');
      assert.equal(s.up.count(tag), 1);
      assert.deepEqual(JSON.parse(s.up.bodies.get(tag)[0]), { title: 'Disk full' });
    });
  }

  test('action: an approval-gated effect interrupts the graph, and runs once after a second principal approves', async () => {
    const tag = h.tag('lg-approval');
    const refund = idempotentEffect(s.client(), { name: 'refund', action: 'refund.issue', interrupt }, (r) => h.effect(s.up.url, tag, r));
    const graph = new StateGraph(State)
      .addNode('act', async (state, config) => ({ ticket: await refund({ amount: 1500, customer: tag }, config) }))
      .addEdge(START, 'act').addEdge('act', END).compile({ checkpointer: new MemorySaver() });
    const first = await graph.invoke({ title: 'refund' }, thread(tag));
    const asked = first.__interrupt__[0].value;
    assert.equal(asked.idemgate, 'approval_required');
    assert.equal(asked.summary, `Refund 1500 to ${tag}`);
    // Resumed before anyone decided: interrupted again, nothing run.
    const early = await graph.invoke(new Command({ resume: 'go' }), thread(tag));
    assert.equal(early.__interrupt__[0].value.approvalId, asked.approvalId);
    assert.equal(s.up.count(tag), 0);
    assert.equal((await s.gw.approve(asked.approvalId, 'agent-token')).status, 403);
    assert.equal((await s.gw.approve(asked.approvalId)).status, 200);
    const out = await graph.invoke(new Command({ resume: 'go' }), thread(tag));
    assert.equal(out.ticket.id, `eff_${tag}_1`);
    assert.equal(s.up.count(tag), 1);
  });

  test('request: SIGKILL of the Node process after the effect, before LangGraph checkpointed it; resumed from the checkpoint in a new process: one effect', async () => {
    const tag = h.tag('lg-kill');
    const args = { url: s.gw.url, journal: path.join(h.tempdir(), 'journal.jsonl'), checkpoints: path.join(h.tempdir(), 'checkpoints.json'), tag, thread: `thread-${tag}` };
    const hold = s.up.hold(tag);
    const doomed = h.child(APP, [JSON.stringify({ ...args, step: 'start' })]);
    await hold.arrived;
    await doomed.kill9();
    hold.release();
    const resumed = h.child(APP, [JSON.stringify({ ...args, step: 'resume' })]);
    const done = await resumed.until('done');
    await resumed.exited;
    assert.equal(done.ticket.id, `eff_${tag}_1`);
    assert.equal(s.up.count(tag), 1);
  });
});
