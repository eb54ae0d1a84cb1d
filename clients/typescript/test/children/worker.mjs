// A worker process the tests kill with SIGKILL: it runs one client call
// and says on stdout, one JSON line each, where it is, so that the test
// kills it at the moment it means (after the effect, before it is
// recorded) by waiting for an event, never for a time.
//
// argv: JSON {url, token, journal, mode, ...}. Modes:
//   action:   client.action(name, {key|intent, command}) whose block makes
//             the effect at the upstream, says "effect", then waits forever
//             (the test kills it before the completion is sent);
//   complete: the same action, left to complete; says "recorded" after it
//             returns, then waits forever (killed before its caller
//             records anything);
//   request:  client.request through the gateway (the upstream holds the
//             answer); says "sending" once the intent is in the journal.

import { Client } from '@idemgate/client';

const a = JSON.parse(process.argv[2]);
const say = (event, extra = {}) => process.stdout.write(JSON.stringify({ event, ...extra }) + '\n');
const client = new Client({ url: a.url, token: a.token, journal: a.journal });
const forever = () => new Promise(() => setInterval(() => {}, 1 << 30));

async function effect(tag) {
  const r = await fetch(`${a.upstream}/effects/${tag}`, { method: 'POST', body: '{}' });
  return r.json();
}

if (a.mode === 'action' || a.mode === 'complete') {
  const opts = { command: a.command };
  if (a.key) opts.key = a.key;
  else opts.intent = a.intent;
  const result = await client.action(a.action, opts, async (op) => {
    say('owner', { operationId: op.operationId });
    const r = await effect(a.tag);
    if (a.mode === 'action') {
      say('effect', r);
      await forever();
    }
    return r;
  });
  say('recorded', { result });
  await forever();
} else if (a.mode === 'request') {
  const journal = await client._journal();
  const orig = journal.beginAttempt.bind(journal);
  journal.beginAttempt = async (key) => {
    const n = await orig(key);
    say('sending', { key });
    return n;
  };
  const out = await client.request({ method: 'POST', path: a.path, body: a.body, intent: a.intent });
  say('answered', { kind: out.kind });
  await forever();
}
