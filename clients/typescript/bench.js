// One run, side by side: client.action around an effect against the same
// effect made with a bare fetch, at concurrency 1 and 16. The effect is a
// POST to a small upstream in a process of its own; the gateway is a real
// `idemgate serve` on SQLite (its default, durable: every reservation and
// completion waits for the disk), built from this repository.
//
//   node clients/typescript/bench.js [-n 400] [--store postgres]
//
// It prints the median (p50) and p90 time per effect, effects per second,
// and the ratios action / fetch.

import { spawn } from 'node:child_process';
import { Client } from './src/index.js';
import * as h from './test/harness.js';

const arg = (name, dflt) => {
  const i = process.argv.indexOf(name);
  return i > 0 ? process.argv[i + 1] : dflt;
};
const N = Number(arg('-n', 400));
const store = arg('--store', 'sqlite');

const UPSTREAM = `
const http = require('node:http');
let n = 0;
const s = http.createServer((req, res) => { req.resume(); req.on('end', () => { n++; res.writeHead(201, {'Content-Type': 'application/json'}).end(JSON.stringify({ id: 'e' + n })); }); });
s.keepAliveTimeout = 60000;
s.listen(0, '127.0.0.1', () => console.log(s.address().port));`;

async function upstream() {
  const p = spawn(process.execPath, ['-e', UPSTREAM], { stdio: ['ignore', 'pipe', 'inherit'] });
  const port = await new Promise((r) => p.stdout.once('data', (d) => r(String(d).trim())));
  return { url: `http://127.0.0.1:${port}`, stop: () => p.kill() };
}

// Runs n calls of fn(i) with c at a time; the time of each, in ms.
async function measure(n, c, fn) {
  const times = [];
  let next = 0;
  const start = performance.now();
  await Promise.all(Array.from({ length: c }, async () => {
    while (next < n) {
      const i = next++;
      const t0 = performance.now();
      await fn(i);
      times.push(performance.now() - t0);
    }
  }));
  const wall = performance.now() - start;
  times.sort((a, b) => a - b);
  return { p50: times[Math.floor(n * 0.5)], p90: times[Math.floor(n * 0.9)], rate: (n / wall) * 1000 };
}

const up = await upstream();
const gw = await h.Gateway.start({ skip() { throw new Error('go is needed'); } }, { store });
const client = new Client({ url: gw.url, token: 'agent-token', journal: `${h.tempdir()}/journal.jsonl` });
const effect = async (i) => {
  const r = await fetch(`${up.url}/effects/bench`, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ i }) });
  return r.json();
};
let round = 0;
const action = async (i) => {
  const k = `bench:${round}:${i}`;
  return client.action('reply.send', { key: k, command: { i } }, () => effect(i));
};
const rows = [];
for (const c of [1, 16]) {
  round++;
  await measure(50, c, effect); // warm both paths
  await measure(50, c, (i) => action(i + N));
  round++;
  const bare = await measure(N, c, effect);
  const act = await measure(N, c, action);
  rows.push({ c, bare, act });
}
console.log(`client.action against a bare fetch of the same effect, ${N} effects each, store ${store}, node ${process.version}`);
console.log('c   | fetch p50 ms | action p50 ms | ratio p50 | fetch/s | action/s | ratio rate');
for (const { c, bare, act } of rows) {
  console.log(`${String(c).padEnd(3)} | ${bare.p50.toFixed(2).padStart(12)} | ${act.p50.toFixed(2).padStart(13)} | ${(act.p50 / bare.p50).toFixed(2).padStart(9)} | ${bare.rate.toFixed(0).padStart(7)} | ${act.rate.toFixed(0).padStart(8)} | ${(act.rate / bare.rate).toFixed(2)}`);
}
console.log('(p90 ms: ' + rows.map((r) => `c=${r.c} fetch ${r.bare.p90.toFixed(2)}, action ${r.act.p90.toFixed(2)}`).join('; ') + ')');
await client.close();
await gw.close();
up.stop();
