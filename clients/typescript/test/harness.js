// A real gateway for the tests: the idemgate binary, built from this
// repository (once per run: test/run.js builds it, or takes the one
// IDEMGATE_TEST_BINARY names, and passes its path in IDEMGATE_BIN),
// started as processes on ports the kernel picks, with a SQLite store in
// a temporary directory, or a schema of its own on PostgreSQL. Nothing is
// mocked: the client talks to `idemgate serve`, and effects are counted
// where they happen, at a local upstream (a Node HTTP server in the test
// process) that the gateway's routes forward to and that actions' blocks
// call themselves.
//
// Without go the tests skip loudly; under CI=true they fail.

import { spawn, spawnSync, execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { givenBinary } from './given-binary.js';

export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const PKG = path.dirname(HERE);
export const REPO = path.resolve(PKG, '..', '..');
export const CI = process.env.CI === 'true';

// The principals every gateway here knows: bearer token -> [name, tenant, roles].
export const TOKENS = {
  'agent-token': ['agent', 'acme', ['agent']],
  'alice-token': ['alice', 'acme', ['approver', 'admin']],
};

export const AGENT_SECRET = 'a-typescript-test-secret-of-more-than-16-bytes';
const ROOT = fs.mkdtempSync(path.join(os.tmpdir(), 'idemgate-ts-tests-'));
process.env.IDEMGATE_AGENT_SECRET = AGENT_SECRET;
delete process.env.IDEMGATE_AGENT_SECRET_FILE;
delete process.env.IDEMGATE_AGENT;
process.env.XDG_CONFIG_HOME = path.join(ROOT, 'config');
const procs = new Set();
process.on('exit', () => {
  for (const p of procs) p.kill('SIGKILL');
  fs.rmSync(ROOT, { recursive: true, force: true });
});

/** A fresh directory, removed when the test process exits. */
export function tempdir() {
  return fs.mkdtempSync(path.join(ROOT, 'd-'));
}

let built = null;
/**
 * The idemgate binary: $IDEMGATE_BIN, else $IDEMGATE_TEST_BINARY's, else
 * built from this repository once per process.
 */
export function binary(t) {
  if (process.env.IDEMGATE_BIN) return process.env.IDEMGATE_BIN;
  if (built) return built;
  built = givenBinary();
  if (built) return built;
  const go = spawnSync('go', ['version']);
  if (go.status !== 0) {
    const msg = "go is not installed: the TypeScript client's tests need it to build idemgate";
    if (CI) throw new Error(`${msg} (CI=true: failing, not skipping)`);
    console.error(`\n*** SKIP: ${msg}`);
    t.skip(msg);
    return null;
  }
  const out = path.join(ROOT, 'idemgate');
  const r = spawnSync('go', ['build', '-o', out, './cmd/idemgate'], { cwd: REPO, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`go build ./cmd/idemgate failed:\n${r.stderr}`);
  built = out;
  return out;
}

/** A server process whose log is a file; its address is read from its "listening" line. */
export class Process {
  static async start(bin, args, cwd, name) {
    const p = new Process();
    p.logPath = path.join(cwd, `${name}.log`);
    const fd = fs.openSync(p.logPath, 'w');
    p.proc = spawn(bin, args, { cwd, stdio: ['ignore', fd, fd] });
    fs.closeSync(fd);
    procs.add(p.proc);
    p.proc.on('exit', () => procs.delete(p.proc));
    p.addr = await p._listening();
    p.url = `http://${p.addr}`;
    return p;
  }

  async _listening() {
    for (let i = 0; i < 1000; i++) {
      if (this.proc.exitCode !== null) throw new Error(`${this.logPath}: exited ${this.proc.exitCode}:\n${this.log()}`);
      for (const line of this.log().split('\n')) {
        try {
          const e = JSON.parse(line);
          if (e.msg === 'listening' && e.addr) return e.addr;
        } catch { /* not JSON */ }
      }
      await sleep(20);
    }
    throw new Error(`${this.logPath}: not listening after 20 s:\n${this.log()}`);
  }

  log() {
    return fs.readFileSync(this.logPath, 'utf8');
  }

  async stop() {
    if (this.proc.exitCode !== null || this.proc.signalCode) return;
    const gone = new Promise((r) => this.proc.once('exit', r));
    this.proc.kill('SIGTERM');
    const t = setTimeout(() => this.proc.kill('SIGKILL'), 5000);
    await gone;
    clearTimeout(t);
  }
}

export function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}

/** One plain request (fetch, not the client under test): status, headers and the body as JSON or text. */
export async function call(method, url, body, token, headers = {}) {
  const h = { ...headers };
  if (token) h.Authorization = `Bearer ${token}`;
  if (body !== undefined) h['Content-Type'] = 'application/json';
  const r = await fetch(url, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let parsed = text;
  try {
    parsed = text ? JSON.parse(text) : null;
  } catch { /* text */ }
  return { status: r.status, headers: r.headers, body: parsed };
}

/**
 * The local upstream: POST /effects/{tag} (and /v1/effects/{tag},
 * /v1/gated/{tag}, where the gateway forwards) performs one effect (counted
 * per tag) and answers 201 {"id","tag","n"}. A test may hold the answer
 * to the next effect of a tag (the effect is counted first, the answer
 * waits for release()), drop it (the connection is closed once counted),
 * and wait until a tag has been performed n times.
 */
export class Upstream {
  static async start() {
    const u = new Upstream();
    u.counts = new Map();
    u.bodies = new Map();
    u.holds = new Map();
    u.drops = new Set();
    u.waiters = [];
    u.server = http.createServer((req, res) => u._serve(req, res));
    u.server.keepAliveTimeout = 60_000;
    await new Promise((r) => u.server.listen(0, '127.0.0.1', r));
    u.url = `http://127.0.0.1:${u.server.address().port}`;
    return u;
  }

  _serve(req, res) {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', async () => {
      const m = /^(?:\/v1)?\/(?:effects|gated)\/([^/?]+)$/.exec(req.url);
      if (req.method === 'GET' && req.url === '/healthz') return res.end('ok');
      if (req.method !== 'POST' || !m) {
        res.writeHead(404).end();
        return;
      }
      const tag = decodeURIComponent(m[1]);
      const n = (this.counts.get(tag) || 0) + 1;
      this.counts.set(tag, n);
      const list = this.bodies.get(tag) || [];
      list.push(Buffer.concat(chunks).toString('utf8'));
      this.bodies.set(tag, list);
      this._wake();
      const hold = this.holds.get(tag);
      if (hold) {
        this.holds.delete(tag);
        hold.arrived();
        await hold.released;
      }
      if (this.drops.has(tag)) {
        this.drops.delete(tag);
        req.socket.destroy();
        return;
      }
      const body = JSON.stringify({ id: `eff_${tag}_${n}`, tag, n });
      res.writeHead(201, { 'Content-Type': 'application/json' }).end(body);
    });
  }

  /** How many times the effect tag was performed. */
  count(tag) {
    return this.counts.get(tag) || 0;
  }

  /** Holds the answer to the next effect of tag: { arrived: Promise, release() }. */
  hold(tag) {
    let arrived;
    let release;
    const h = {
      arrivedP: new Promise((r) => { arrived = r; }),
      released: new Promise((r) => { release = r; }),
    };
    h.arrived = arrived;
    this.holds.set(tag, h);
    return { arrived: h.arrivedP, release };
  }

  /** Closes the connection of the next effect of tag once it is counted: its answer is lost. */
  drop(tag) {
    this.drops.add(tag);
  }

  /** Resolves once tag has been performed n times. */
  reached(tag, n = 1) {
    return new Promise((resolve) => {
      this.waiters.push({ tag, n, resolve });
      this._wake();
    });
  }

  _wake() {
    this.waiters = this.waiters.filter((w) => (this.count(w.tag) >= w.n ? (w.resolve(), false) : true));
  }

  close() {
    this.server.closeAllConnections?.();
    return new Promise((r) => this.server.close(r));
  }
}

/** The action a block performs: one POST to the upstream, its answer as the result. */
export async function effect(upstreamUrl, tag, body = {}) {
  const r = await fetch(`${upstreamUrl}/effects/${encodeURIComponent(tag)}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  if (r.status !== 201) throw new Error(`upstream answered ${r.status}`);
  return r.json();
}

export const ACTIONS = `actions:
  - {name: ticket.create, lease: 1s}
  - {name: reply.send, lease: 1s}
  - {name: storm.send, lease: 2s}
  - name: refund.issue
    lease: 1s
    approval: {ttl: 15m, approvers: [approver], summary: 'Refund {{.body.amount}} to {{.body.customer}}'}
`;

/** The PostgreSQL the tests use: $IDEMGATE_TEST_POSTGRES, else the machine's. */
export const PG = process.env.IDEMGATE_TEST_POSTGRES || 'postgres://postgres@127.0.0.1:5432/test?sslmode=disable';

/** Whether PostgreSQL answers; under CI=true its absence fails the caller. */
export function postgresUp() {
  const r = spawnSync('pg_isready', ['-q', '-d', PG]);
  return r.status === 0;
}

/**
 * `idemgate serve` with the principals of TOKENS, the test actions, and
 * routes POST /v1/effects/{tag} (and /v1/gated/{tag}, which needs an
 * approver's approval) forwarded to the upstream. store:
 * 'sqlite' (a file in its directory) or 'postgres' (a schema of its own,
 * dropped at close).
 */
export class Gateway {
  static async start(t, { store = 'sqlite', upstream, actions = ACTIONS, sweep = '100ms' } = {}) {
    const bin = binary(t);
    if (!bin) return null;
    const g = new Gateway();
    g.dir = tempdir();
    g.upstream = upstream;
    let dsn = `sqlite:${path.join(g.dir, 'gw.db')}`;
    if (store === 'postgres') {
      g.schema = `ts_${randomBytes(6).toString('hex')}`;
      const u = new URL(PG);
      u.searchParams.set('search_path', g.schema);
      dsn = u.toString();
    }
    const principals = Object.entries(TOKENS).map(([tok, [n, tenant, roles]]) =>
      `  - {name: ${n}, tenant: ${tenant}, roles: [${roles.join(', ')}], token_sha256: ${sha256(tok)}}`).join('\n');
    let routes = '';
    let upstreams = '';
    if (upstream) {
      upstreams = `upstreams:\n  effects: {url: ${upstream.url}, timeout: 10s}\n`;
      routes = `routes:
  - match: POST /v1/effects/{tag}
    upstream: effects
    lease: 2s
  - match: POST /v1/gated/{tag}
    upstream: effects
    lease: 2s
    approval: {ttl: 15m, approvers: [approver], summary: 'Effect {{.params.tag}}'}
`;
    }
    const config = `listen: 127.0.0.1:0\nstore: ${JSON.stringify(dsn)}\nsweep_interval: ${sweep}\nshutdown_timeout: 5s\n${upstreams}principals:\n${principals}\n${routes}${actions}`;
    g.config = path.join(g.dir, 'gw.yaml');
    fs.writeFileSync(g.config, config);
    g.gw = await Process.start(bin, ['serve', '--config', g.config], g.dir, 'gateway');
    g.url = g.gw.url;
    for (let i = 0; i < 500; i++) {
      try {
        if ((await fetch(`${g.url}/readyz`)).status === 200) return g;
      } catch { /* not yet */ }
      await sleep(20);
    }
    throw new Error(`gateway not ready:\n${g.gw.log()}`);
  }

  async operation(id, token = 'agent-token') {
    const r = await call('GET', `${this.url}/_idem/v1/operations/${id}`, undefined, token);
    if (r.status !== 200) throw new Error(`operation ${id}: ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  }

  async byKey(key, token = 'agent-token') {
    const r = await call('GET', `${this.url}/_idem/v1/operations?key=${encodeURIComponent(key)}`, undefined, token);
    return r.status === 200 ? r.body : null;
  }

  /** Resolves with the first pending approval (polling the control API as an approver would). */
  async pendingApproval(token = 'alice-token') {
    for (;;) {
      const r = await call('GET', `${this.url}/_idem/v1/approvals?status=pending`, undefined, token);
      const list = Array.isArray(r.body) ? r.body : (r.body && (r.body.approvals || r.body.items)) || [];
      if (list.length) return list[0];
      await sleep(50);
    }
  }

  /** An approver's decision through the control API, echoing the fingerprint it shows. */
  async approve(id, token = 'alice-token', decision = 'approve') {
    const base = `${this.url}/_idem/v1/approvals/${id}`;
    const got = await call('GET', base, undefined, token);
    if (got.status !== 200) return got;
    return call('POST', `${base}/${decision}`, { fingerprint: got.body.fingerprint, note: 'checked' }, token);
  }

  async close() {
    await this.gw?.stop();
    if (this.schema) {
      try {
        execFileSync('psql', ['-q', '-d', PG, '-c', `DROP SCHEMA IF EXISTS ${this.schema} CASCADE`], { stdio: 'ignore' });
      } catch { /* left for the DBA: a test schema */ }
    }
  }
}

function sha256(s) {
  return createHash('sha256').update(s).digest('hex');
}

/** A unique tag per test case, so that cases sharing an upstream count apart. */
export function tag(name) {
  return `${name}-${randomBytes(4).toString('hex')}`;
}

/**
 * A Node child process running script with args; `until(event)` resolves
 * with the first JSON line it prints whose event is that one, and
 * `kill9()` sends SIGKILL and waits for the process to be gone.
 */
export function child(script, args) {
  const proc = spawn(process.execPath, [script, ...args], { cwd: PKG, stdio: ['ignore', 'pipe', 'pipe'] });
  procs.add(proc);
  const events = [];
  const waiters = [];
  let buf = '';
  let stderr = '';
  proc.stderr.on('data', (d) => { stderr += d; });
  proc.stdout.on('data', (d) => {
    buf += d;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      try {
        events.push(JSON.parse(line));
      } catch { continue; }
      for (const w of [...waiters]) w();
    }
  });
  const exited = new Promise((r) => proc.on('exit', (code, signal) => { procs.delete(proc); r({ code, signal }); for (const w of [...waiters]) w(); }));
  return {
    proc,
    events,
    until(event) {
      return new Promise((resolve, reject) => {
        const check = () => {
          const e = events.find((x) => x.event === event);
          if (e) {
            waiters.splice(waiters.indexOf(check), 1);
            resolve(e);
          } else if (proc.exitCode !== null || proc.signalCode) {
            waiters.splice(waiters.indexOf(check), 1);
            reject(new Error(`child exited before ${event}: ${stderr}`));
          }
        };
        waiters.push(check);
        check();
      });
    },
    async kill9() {
      proc.kill('SIGKILL');
      return exited;
    },
    exited,
  };
}
