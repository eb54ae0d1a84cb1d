// client.request through a real gateway: the Go agent's Do, rule for
// rule. An answer lost on its way back is asked about, never sent again
// blind; an upstream that drops the connection after its effect leaves an
// honest unknown; a journal kept across a SIGKILL.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { Conflict } from '../src/index.js';
import * as h from './harness.js';
import { loseNextAnswer, suite } from './frameworks.js';

const WORKER = path.join(h.HERE, 'children', 'worker.mjs');

describe('client.request', () => {
  let s;
  before(async (t) => { s = await suite(t); });
  after(async () => { await s?.close(); });

  test('created, then replayed under the same intent; a changed body is refused before sending', async () => {
    const tag = h.tag('req');
    const c = s.client();
    const a = await c.request({ method: 'POST', path: `/v1/effects/${tag}`, body: { title: 'x' }, intent: `t:${tag}` });
    const b = await c.request({ method: 'post', path: `/v1/effects/${tag}`, body: { title: 'x' }, intent: `t:${tag}` });
    assert.deepEqual([a.kind, b.kind, a.sent, a.status], ['created', 'replayed', 'yes', 201]);
    assert.deepEqual(b.json(), a.json());
    await assert.rejects(c.request({ method: 'POST', path: `/v1/effects/${tag}`, body: { title: 'y' }, intent: `t:${tag}` }),
      (e) => e instanceof Conflict && e.code === 'payload_changed');
    const again = await c.request({ method: 'POST', path: `/v1/effects/${tag}`, body: { title: 'x' }, intent: `t:${tag}`, mode: 'repeat' });
    assert.equal(again.kind, 'created');
    assert.equal(again.intent, `t:${tag}#2`);
    assert.equal(s.up.count(tag), 2);
  });

  test('an answer lost on its way back is asked about by key, and replayed: one effect', async () => {
    const tag = h.tag('lost');
    const c = s.client();
    loseNextAnswer(c, new RegExp(`/v1/effects/${tag}$`));
    const out = await c.request({ method: 'POST', path: `/v1/effects/${tag}`, body: {}, intent: `t:${tag}` });
    assert.equal(out.kind, 'replayed');
    assert.equal(out.json().id, `eff_${tag}_1`);
    assert.equal(s.up.count(tag), 1);
  });

  test('an upstream that drops the connection after its effect: unknown, never sent again', async () => {
    const tag = h.tag('dropped');
    const c = s.client();
    s.up.drop(tag);
    const out = await c.request({ method: 'POST', path: `/v1/effects/${tag}`, body: {}, intent: `t:${tag}` });
    assert.equal(out.kind, 'unknown');
    assert.match(out.nextStep, /Do not retry/);
    const again = await c.request({ method: 'POST', path: `/v1/effects/${tag}`, body: {}, intent: `t:${tag}` });
    assert.equal(again.kind, 'unknown');
    assert.equal(s.up.count(tag), 1);
  });

  test('an approval-gated route waits, and runs once after a second principal approves', async () => {
    const tag = h.tag('gated');
    const c = s.client();
    const first = await c.request({ method: 'POST', path: `/v1/gated/${tag}`, body: {}, intent: `t:${tag}` });
    assert.equal(first.kind, 'needs_approval');
    assert.equal(first.approval.summary, `Effect ${tag}`);
    const waiting = c.request({ method: 'POST', path: `/v1/gated/${tag}`, body: {}, intent: `t:${tag}`, approvalWait: 60_000 });
    assert.equal((await s.gw.approve(first.approval.id)).status, 200);
    const out = await waiting;
    assert.equal(out.kind, 'created');
    assert.equal(s.up.count(tag), 1);
  });

  test('SIGKILL while the request is in flight: the intent is in the journal, and the resume replays it', async () => {
    const tag = h.tag('killreq');
    const journal = path.join(h.tempdir(), 'journal.jsonl');
    const hold = s.up.hold(tag);
    const w = h.child(WORKER, [JSON.stringify({ url: s.gw.url, token: 'agent-token', journal, mode: 'request', path: `/v1/effects/${tag}`, body: { n: 1 }, intent: `t:${tag}` })]);
    await w.until('sending');
    await hold.arrived;
    await w.kill9();
    hold.release();
    const c = s.client(journal);
    await assert.rejects(c.request({ method: 'POST', path: `/v1/effects/${tag}`, body: { n: 2 }, intent: `t:${tag}` }), (e) => e.code === 'payload_changed');
    const out = await c.request({ method: 'POST', path: `/v1/effects/${tag}`, body: { n: 1 }, intent: `t:${tag}` });
    assert.equal(out.kind, 'replayed');
    assert.equal(s.up.count(tag), 1);
    const st = await c.status(`t:${tag}`);
    assert.equal(st.kind, 'replayed');
  });
});
