// client.action and idempotent() against a real gateway's actions, on
// SQLite and on PostgreSQL. Effects are counted at the local upstream.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import {
  ApprovalRequired, Client, Conflict, IdemgateError, NotPerformed, OutcomeUnknown, idempotent,
} from '../src/index.js';
import * as h from './harness.js';

const WORKER = path.join(h.HERE, 'children', 'worker.mjs');

for (const store of ['sqlite', 'postgres']) {
  describe(`client.action on ${store}`, () => {
    let up;
    let gw;
    let client;
    before(async (t) => {
      if (store === 'postgres' && !h.postgresUp()) {
        if (h.CI) throw new Error(`PostgreSQL unreachable at ${h.PG} (CI=true: failing, not skipping)`);
        console.error(`*** SKIP: PostgreSQL unreachable at ${h.PG}`);
        return;
      }
      up = await h.Upstream.start();
      gw = await h.Gateway.start(t, { store, upstream: up });
      client = new Client({ url: gw.url, token: 'agent-token', journal: path.join(h.tempdir(), 'j.jsonl') });
    });
    after(async () => {
      await client?.close();
      await gw?.close();
      await up?.close();
    });
    const skip = () => !gw;

    test('the owner runs the block once; a replay returns the recorded result without running it', async (t) => {
      if (skip()) return t.skip('no PostgreSQL');
      const tag = h.tag('owner');
      const key = `ticket:${tag}:v1`;
      let runs = 0;
      const block = async (op) => {
        runs++;
        assert.equal(op.replayed, false);
        assert.ok(op.operationId && Number.isInteger(op.fence));
        return h.effect(up.url, tag);
      };
      const first = await client.perform('ticket.create', { key, command: { ticket: tag } }, block);
      const again = await client.perform('ticket.create', { key, command: { ticket: tag } }, block);
      assert.equal(runs, 1);
      assert.equal(up.count(tag), 1);
      assert.deepEqual([first.replayed, again.replayed], [false, true]);
      assert.deepEqual(again.result, first.result);
      assert.equal(again.operationId, first.operationId);
      const view = await gw.operation(first.operationId);
      assert.deepEqual([view.state, view.route], ['succeeded', 'action:ticket.create']);
    });

    test('sixteen concurrent callers: one effect, fifteen replays of its result', async (t) => {
      if (skip()) return t.skip('no PostgreSQL');
      const tag = h.tag('storm');
      let release;
      const gate = new Promise((r) => { release = r; });
      const runs = Array.from({ length: 16 }, () => client.perform('storm.send', { key: `storm:${tag}`, command: { to: 'ops' } },
        async () => {
          const r = await h.effect(up.url, tag);
          await gate; // the others meet it in flight
          return r;
        }));
      await up.reached(tag, 1);
      release();
      const got = await Promise.all(runs);
      assert.equal(up.count(tag), 1);
      assert.equal(got.filter((g) => !g.replayed).length, 1);
      assert.ok(got.every((g) => g.result.id === got[0].result.id));
    });

    test('a changed command under the same key or intent is refused, and nothing runs', async (t) => {
      if (skip()) return t.skip('no PostgreSQL');
      const tag = h.tag('changed');
      await client.action('ticket.create', { key: `k:${tag}`, command: { amount: 10 } }, () => h.effect(up.url, tag));
      await client.action('ticket.create', { intent: `i:${tag}`, command: { amount: 10 } }, () => h.effect(up.url, tag));
      const other = h.tag('changed-other');
      await assert.rejects(client.action('ticket.create', { key: `k:${tag}`, command: { amount: 11 } }, () => h.effect(up.url, other)),
        (e) => e instanceof Conflict && e.code === 'fingerprint_mismatch' && e.status === 422);
      // Under an intent the journal refuses it before anything is sent.
      await assert.rejects(client.action('ticket.create', { intent: `i:${tag}`, command: { amount: 11 } }, () => h.effect(up.url, other)),
        (e) => e instanceof Conflict && e.code === 'payload_changed' && e.status === null);
      assert.equal(up.count(tag), 2);
      assert.equal(up.count(other), 0);
    });

    test('NotPerformed releases: the next call runs the block; any other throw records unknown', async (t) => {
      if (skip()) return t.skip('no PostgreSQL');
      const tag = h.tag('release');
      await assert.rejects(client.action('reply.send', { key: `r:${tag}`, command: {} }, async () => {
        throw new NotPerformed('mailbox full, nothing sent');
      }), NotPerformed);
      const r = await client.perform('reply.send', { key: `r:${tag}`, command: {} }, () => h.effect(up.url, tag));
      assert.equal(r.replayed, false);
      assert.equal(up.count(tag), 1);
      class SmtpTimeout extends Error {}
      await assert.rejects(client.action('reply.send', { key: `u:${tag}`, command: {} }, async () => {
        await h.effect(up.url, tag);
        throw new SmtpTimeout('to alice@example.com');
      }), SmtpTimeout);
      await assert.rejects(client.action('reply.send', { key: `u:${tag}`, command: {} }, () => h.effect(up.url, tag)),
        (e) => e instanceof OutcomeUnknown && e.code === 'outcome_unknown' && e.status === 409 && !!e.operationId);
      assert.equal(up.count(tag), 2);
      const view = await gw.byKey(`u:${tag}`);
      assert.ok(view.history.some((x) => (x.reason || '').endsWith('the block threw SmtpTimeout')), JSON.stringify(view.history));
    });

    test('an approval-gated action waits, and runs once after a second principal approves', async (t) => {
      if (skip()) return t.skip('no PostgreSQL');
      const tag = h.tag('refund');
      const command = { amount: 1500, customer: tag };
      await assert.rejects(client.action('refund.issue', { key: `rf:${tag}`, command }, () => h.effect(up.url, tag)),
        (e) => e instanceof ApprovalRequired && e.status === 202 && e.summary === `Refund 1500 to ${tag}` && !!e.approvalId);
      const waiting = client.perform('refund.issue', { key: `rf:${tag}`, command, approvalWait: 60_000 }, () => h.effect(up.url, tag));
      const ap = await gw.pendingApproval();
      assert.equal((await gw.approve(ap.id, 'agent-token')).status, 403); // the requester may not approve
      assert.equal(up.count(tag), 0);
      assert.equal((await gw.approve(ap.id)).status, 200);
      const done = await waiting;
      assert.equal(done.replayed, false);
      const again = await client.perform('refund.issue', { key: `rf:${tag}`, command }, () => h.effect(up.url, tag));
      assert.deepEqual([again.replayed, again.result], [true, done.result]);
      assert.equal(up.count(tag), 1);
    });

    test('SIGKILL of the owner after the effect: the resume is outcome_unknown, never a second run', async (t) => {
      if (skip()) return t.skip('no PostgreSQL');
      const tag = h.tag('killed');
      const w = h.child(WORKER, [JSON.stringify({
        url: gw.url, token: 'agent-token', journal: path.join(h.tempdir(), 'j.jsonl'), mode: 'action',
        action: 'reply.send', key: `kill:${tag}`, command: { to: tag }, upstream: up.url, tag,
      })]);
      await w.until('effect');
      assert.deepEqual(await w.kill9(), { code: null, signal: 'SIGKILL' });
      let ran = 0;
      await assert.rejects(client.action('reply.send', { key: `kill:${tag}`, command: { to: tag } }, () => { ran++; }),
        (e) => e instanceof OutcomeUnknown && e.status === 409);
      assert.equal(ran, 0);
      assert.equal(up.count(tag), 1);
    });

    test('SIGKILL after the completion, before the caller recorded it: the resume replays it', async (t) => {
      if (skip()) return t.skip('no PostgreSQL');
      const tag = h.tag('killed-late');
      const journal = path.join(h.tempdir(), 'j.jsonl');
      const w = h.child(WORKER, [JSON.stringify({
        url: gw.url, token: 'agent-token', journal, mode: 'complete', action: 'reply.send', intent: `send:${tag}`,
        command: { to: tag }, upstream: up.url, tag,
      })]);
      const { result } = await w.until('recorded');
      await w.kill9();
      const again = new Client({ url: gw.url, token: 'agent-token', journal });
      try {
        const r = await again.perform('reply.send', { intent: `send:${tag}`, command: { to: tag } }, () => h.effect(up.url, tag));
        assert.deepEqual([r.replayed, r.result], [true, result]);
        await assert.rejects(again.action('reply.send', { intent: `send:${tag}`, command: { to: 'else' } }, () => h.effect(up.url, tag)),
          (e) => e instanceof Conflict && e.code === 'payload_changed');
      } finally {
        await again.close();
      }
      assert.equal(up.count(tag), 1);
    });

    test('idempotent(fn, options): one run per key, the result as JSON reads it back', async (t) => {
      if (skip()) return t.skip('no PostgreSQL');
      const tag = h.tag('render');
      let calls = 0;
      const render = idempotent(async (order, version) => {
        calls++;
        return { pdf: `${order}-v${version}.pdf`, at: new Date(0) };
      }, { client, action: 'ticket.create', key: (order, version) => `pdf:${tag}:${order}:v${version}` });
      const a = await render('o1', 3);
      const b = await render('o1', 3);
      assert.deepEqual(a, { pdf: 'o1-v3.pdf', at: '1970-01-01T00:00:00.000Z' });
      assert.deepEqual(b, a);
      assert.equal(calls, 1);
      await render('o1', 4);
      assert.equal(calls, 2);
    });
  });
}

test('a block that outlives three lease periods keeps its lease by heartbeats', async (t) => {
  const up = await h.Upstream.start();
  const gw = await h.Gateway.start(t, { upstream: up });
  const client = new Client({ url: gw.url, token: 'agent-token', journal: path.join(h.tempdir(), 'j.jsonl') });
  try {
    const tag = h.tag('long');
    const r = await client.perform('reply.send', { key: `long:${tag}`, command: {} }, async (op) => {
      // lease 1s, sweep every 100ms: only heartbeats keep it. Each one
      // moves lease_until; wait for three, the operation executing all along.
      const seen = new Set([(await gw.operation(op.operationId)).lease_until]);
      while (seen.size < 4) {
        await h.sleep(100);
        const v = await gw.operation(op.operationId);
        assert.equal(v.state, 'executing');
        seen.add(v.lease_until);
      }
      assert.equal(op.lost, false);
      return h.effect(up.url, tag);
    });
    const view = await gw.operation(r.operationId);
    assert.deepEqual([view.state, view.attempts], ['succeeded', 1]);
  } finally {
    await client.close();
    await gw.close();
    await up.close();
  }
});

test('client errors are one family with code, status and operationId', async () => {
  assert.throws(() => new Client({ url: 'http://127.0.0.1:1' }), (e) => e instanceof IdemgateError && e.code === 'unauthorized');
  const c = new Client({ url: 'http://127.0.0.1:1', token: 't', policy: { maxAttempts: 2, baseDelay: 1 } });
  await assert.rejects(c.action('bad name', { key: 'k' }, () => 1), (e) => e.code === 'invalid_action');
  await assert.rejects(c.action('ok', { key: ' k' }, () => 1), (e) => e.code === 'invalid_key');
  await assert.rejects(c.action('ok', { key: 'k', command: { n: NaN } }, () => 1), (e) => e.code === 'invalid_command');
  await assert.rejects(c.action('ok', { key: 'k', command: new Map() }, () => 1), (e) => e.code === 'invalid_command');
  let ran = 0;
  await assert.rejects(c.action('ok', { key: 'k' }, () => { ran++; }),
    (e) => e instanceof IdemgateError && e.code === 'gateway_unreachable' && e.status === null);
  assert.equal(ran, 0);
  await c.close();
});

test('a block that records its outcome itself returns what it recorded, as a replay does', async (t) => {
  const up = await h.Upstream.start();
  const gw = await h.Gateway.start(t, { upstream: up });
  const client = new Client({ url: gw.url, token: 'agent-token' });
  try {
    const tag = h.tag('self');
    const first = await client.action('reply.send', { key: `self:${tag}`, command: {} }, async (op) => {
      await op.succeed({ messageId: 'm-1' }, { resultRef: 'm-1' });
      return 'ignored';
    });
    const again = await client.action('reply.send', { key: `self:${tag}`, command: {} }, () => 'not run');
    assert.deepEqual([first, again], [{ messageId: 'm-1' }, { messageId: 'm-1' }]);
    await client.action('reply.send', { key: `fail:${tag}`, command: {} }, (op) => op.fail({ error: 'no such mailbox' }));
    await assert.rejects(client.action('reply.send', { key: `fail:${tag}`, command: {} }, () => 'not run'),
      (e) => e instanceof IdemgateError && e.code === 'action_failed' && e.result.error === 'no such mailbox');
  } finally {
    await client.close();
    await gw.close();
    await up.close();
  }
});
