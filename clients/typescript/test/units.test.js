// The parts that need no gateway: canonical JSON, derived keys (the Go
// client's vectors), the secret's places, and the journal file.

import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawn } from 'node:child_process';
import { Journal, Keys, canonical, fingerprint, loadSecret } from '../src/index.js';
import * as h from './harness.js';

const SECRET = 'a-test-secret-of-more-than-sixteen-bytes';

test('canonical JSON is RFC 8785, and what is not JSON is refused with its path', () => {
  assert.equal(canonical({ b: 1, a: [1.0, 'x', null, true], é: -0, '\u20ac': 1e21, z: 1e-7 }),
    '{"a":[1,"x",null,true],"b":1,"z":1e-7,"é":0,"€":1e+21}');
  assert.equal(canonical({ '\ud83d\ude00': 1, '\ufb33': 2 }), '{"\ud83d\ude00":1,"\ufb33":2}'); // UTF-16 code units order
  assert.equal(canonical(2n ** 53n), '9007199254740992');
  for (const [bad, where] of [[{ a: [1, NaN] }, '/a/1'], [{ a: new Set() }, '/a'], [{ 'x/y': ['\ud800'] }, '/x~1y/0'],
    [[undefined], '/0'], [2n ** 60n + 1n, '/'], [{ f() {} }, '/f']]) {
    assert.throws(() => canonical(bad), (e) => e.code === 'invalid_command' && e.detail.endsWith(`(path ${where})`), where);
  }
  let deep = 1;
  for (let i = 0; i < 70; i++) deep = [deep];
  assert.throws(() => canonical(deep), /nesting too deep/);
  // fingerprint.Of's test vector (fingerprint/fingerprint_test.go computes the same document).
  assert.match(fingerprint('post', '/v1/tickets', 'acme', { a: 1 }), /^sha256:[0-9a-f]{64}$/);
});

test("keys are the Go client's, byte for byte, and never show the secret", () => {
  const k = new Keys(SECRET, 'agent-7');
  const anon = new Keys(Buffer.from(SECRET), '');
  assert.equal(k.key('task-42/create-ticket', 1), 'ik1.RvMuxD0NSLUlme4y3ZCKT58YNCgWAlImYV6A9_BaIng');
  assert.equal(k.key('task-42/create-ticket', 2), 'ik1.QyhsDBwPzUJ852NRoYOeqJFtUllm1I4QhhBVjTqBer4');
  assert.equal(anon.key('task-42/create-ticket', 1), 'ik1.SLmApNrS1clOGzLIEwTdl-xD1iVyLNXEEETKGMaP6TQ');
  assert.equal(k.key('tâche-42/créer', 1), 'ik1.pDbzsVJ8QC6JhrHV0-Ng_NQY0s7PYnz4_Q8i1mgYY60');
  assert.ok(!`${k} ${JSON.stringify(k)}`.includes(SECRET));
  assert.throws(() => new Keys('short'), (e) => e.code === 'weak_secret');
  assert.throws(() => new Keys(SECRET, 'bad\nname'), (e) => e.code === 'invalid_agent');
});

test('the secret: a named file, the environment, else one made 0600 on first use', () => {
  const saved = { ...process.env };
  try {
    const config = h.tempdir();
    const named = path.join(h.tempdir(), 'secret');
    fs.writeFileSync(named, 'from-the-named-file-0123456789\n');
    Object.assign(process.env, { XDG_CONFIG_HOME: config, IDEMGATE_AGENT_SECRET: 'from-the-environment-0123456789' });
    assert.equal(loadSecret(named).toString(), 'from-the-named-file-0123456789');
    assert.equal(loadSecret().toString(), 'from-the-environment-0123456789');
    process.env.IDEMGATE_AGENT_SECRET_FILE = path.join(config, 'none');
    assert.throws(() => loadSecret(), (e) => e.code === 'no_secret'); // named, so it must exist
    delete process.env.IDEMGATE_AGENT_SECRET_FILE;
    delete process.env.IDEMGATE_AGENT_SECRET;
    const made = loadSecret();
    const file = path.join(config, 'idemgate', 'agent-secret');
    assert.equal(fs.statSync(file).mode & 0o777, 0o600);
    assert.ok(made.length >= 32);
    assert.deepEqual(loadSecret(), made);
  } finally {
    process.env = saved;
  }
});

test('the journal: created 0600, an intent kept across processes, the first record wins a race', async () => {
  const file = path.join(h.tempdir(), 'journal.jsonl');
  const keys = new Keys(SECRET);
  const keyFor = (n, v) => keys.key(n, v);
  const j = await Journal.open(file);
  assert.equal(fs.statSync(file).mode & 0o777, 0o600);
  const e = await j.create('task-1', 1, 'POST', '/v1/x', 'sha256:a', keyFor);
  assert.equal(e.key, keys.key('task-1', 1));
  // Eight processes create the same intent at once with different commands: one record wins for all.
  const script = `import { Journal } from ${JSON.stringify(path.join(h.PKG, 'src', 'index.js'))};
    const j = await Journal.open(process.argv[1]);
    const e = await j.create('race', 1, 'POST', '/v1/x', 'sha256:' + process.argv[2], (n, v) => 'k-' + n + '-' + v + '-' + process.argv[2]);
    process.stdout.write(e.fingerprint);`;
  const outs = await Promise.all(Array.from({ length: 8 }, (_, i) => new Promise((resolve, reject) => {
    const p = spawn(process.execPath, ['--input-type=module', '-e', script, file, String(i)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => { out += d; });
    p.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`exit ${code}`))));
  })));
  assert.equal(new Set(outs).size, 1, outs.join(' '));
  assert.equal((await j.latest('race')).fingerprint, outs[0]);
  // Attempts and outcomes follow the Go journal's rules.
  const n = await j.beginAttempt(e.key);
  assert.equal(n, 1);
  let got = await j.record(e.key, n, 'created', 201, 'op_1', true, 'yes');
  assert.deepEqual([got.lastKind, got.lastStatus, got.sent, got.operationId], ['created', 201, 'yes', 'op_1']);
  got = await j.record(e.key, 0, 'unknown', 0, '', false, 'maybe');
  assert.equal(got.lastKind, 'created'); // a known success is never replaced by a lesser answer
  assert.deepEqual((await j.pending()).map((x) => x.intent), ['race']);
  await j.close();
  // A torn last line (a crash mid-write) is skipped, and the next record still reads.
  fs.appendFileSync(file, '\n{"t":"intent","name":"torn"');
  const j2 = await Journal.open(file);
  await j2.create('after', 1, 'POST', '/v1/x', 'sha256:b', keyFor);
  assert.equal((await j2.latest('after')).intent, 'after');
  assert.equal(await j2.latest('torn'), null);
  await j2.close();
  // Another program's file is refused, never written into.
  const other = path.join(h.tempdir(), 'other.db');
  fs.writeFileSync(other, 'SQLite format 3\u0000');
  await assert.rejects(Journal.open(other), (e2) => e2.code === 'not_a_journal');
  assert.equal(fs.readFileSync(other, 'utf8'), 'SQLite format 3\u0000');
});
