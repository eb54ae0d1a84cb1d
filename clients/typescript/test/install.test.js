// The package as a user installs it: `npm install <path>` from a project
// of its own, outside the repository (linked, and copied as a packed
// tarball would be, which keeps only the files package.json lists), then
// imported by name and used against a real gateway. No registry is asked:
// the package has no runtime dependency.

import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import * as h from './harness.js';

const SCRIPT = `
import { Client, IdemgateError, Conflict } from '@idemgate/client';
import { idempotentTool } from '@idemgate/client/ai';
import { idempotentTool as agentsTool } from '@idemgate/client/openai-agents';
import { idempotentEffect } from '@idemgate/client/langgraph';
const [url, upstream, tag] = process.argv.slice(2);
const client = new Client({ url, token: 'agent-token', journal: 'journal.jsonl' });
const effect = async () => (await fetch(upstream + '/effects/' + tag, { method: 'POST', body: '{}' })).json();
const a = await client.action('ticket.create', { key: 'install:' + tag, command: { t: tag } }, effect);
const b = await client.action('ticket.create', { key: 'install:' + tag, command: { t: tag } }, effect);
let code = '';
try { await client.action('ticket.create', { key: 'install:' + tag, command: { t: 'other' } }, effect); } catch (e) { code = e instanceof Conflict && e instanceof IdemgateError ? e.code : 'wrong'; }
const out = await client.request({ method: 'POST', path: '/v1/effects/' + tag, body: {}, intent: 'install-' + tag });
console.log(JSON.stringify({ same: a.id === b.id, code, kind: out.kind, adapters: [typeof idempotentTool, typeof agentsTool, typeof idempotentEffect] }));
await client.close();
`;

// A child process run to its end without blocking this process's event
// loop (the upstream the child calls lives here).
function run(cmd, args, cwd) {
  return new Promise((resolve) => {
    const p = spawn(cmd, args, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => { stdout += d; });
    p.stderr.on('data', (d) => { stderr += d; });
    p.on('exit', (status) => resolve({ status, stdout, stderr }));
  });
}

describe('npm install <path>', () => {
  let up;
  let gw;
  before(async (t) => {
    up = await h.Upstream.start();
    gw = await h.Gateway.start(t, { upstream: up });
  });
  after(async () => {
    await gw?.close();
    await up?.close();
  });

  for (const how of ['linked', 'copied']) {
    test(`${how}: imports by name from a project elsewhere, and works`, async () => {
      const dir = h.tempdir();
      fs.writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ name: 'user-app', version: '1.0.0', type: 'module', private: true }));
      const args = ['install', '--offline', '--no-audit', '--no-fund', '--loglevel=error', ...(how === 'copied' ? ['--install-links'] : []), h.PKG];
      const inst = await run('npm', args, dir);
      assert.equal(inst.status, 0, inst.stderr);
      const installed = path.join(dir, 'node_modules', '@idemgate', 'client');
      assert.equal(fs.lstatSync(installed).isSymbolicLink(), how === 'linked');
      if (how === 'copied') assert.equal(fs.existsSync(path.join(installed, 'test')), false);
      fs.writeFileSync(path.join(dir, 'app.mjs'), SCRIPT);
      const tag = h.tag(`install-${how}`);
      const r = await run(process.execPath, ['app.mjs', gw.url, up.url, tag], dir);
      assert.equal(r.status, 0, r.stderr);
      assert.deepEqual(JSON.parse(r.stdout), { same: true, code: 'fingerprint_mismatch', kind: 'created', adapters: ['function', 'function', 'function'] });
      assert.equal(up.count(tag), 2); // one action, one request
    });
  }
});
