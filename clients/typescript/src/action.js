// Actions: effects the caller performs itself, with the gateway as the
// registry (docs/design.md, "Actions"). client.action reserves the key
// before the effect (POST /_idem/v1/actions/{name}); the process that gets
// 201 owns the effect under a lease, kept by heartbeats while its block
// runs, and records the block's result (complete) when it returns. A
// caller that meets a finished operation gets its recorded result without
// running the block (a replay), and one that meets it in flight waits.

import { canonical } from './canonical.js';
import {
  ApprovalRequired, IdemgateError, LeaseLost, NotPerformed, Unavailable, errorFor,
} from './errors.js';
import { TransportError } from './transport.js';
import { parseTime, sleep } from './util.js';

export const NAME = /^[a-z0-9][a-z0-9._-]{0,127}$/;
export const CONTROL = '/_idem/v1';
/** The gateway's bound on a step's reason (control.MaxNote), in characters. */
export const MAX_NOTE = 2000;
const TRANSIENT_CODES = new Set(['store_unavailable', 'rate_limited', 'concurrency_locked', 'upstream_unavailable']);

/**
 * A key the gateway reads exactly as written: 1 to 255 printable ASCII
 * characters, not starting with '"' (read as a Structured-Field string)
 * nor starting or ending with a space (which HTTP drops).
 */
export function checkKey(key) {
  if (typeof key !== 'string' || key.length < 1 || key.length > 255) {
    throw new IdemgateError('invalid_key', 'a key is 1 to 255 characters');
  }
  if (!/^[\x20-\x7e]+$/.test(key)) throw new IdemgateError('invalid_key', 'a key is printable ASCII');
  if (key[0] === '"' || key !== key.trim()) {
    throw new IdemgateError('invalid_key', "a key may not start with '\"', nor start or end with a space");
  }
}

/** Nothing changed and the same request later is safe. */
export function transient(resp) {
  const code = resp.code();
  return TRANSIENT_CODES.has(code) || (!code && [429, 502, 503, 504].includes(resp.status));
}

/** The family's error for a refusal. */
export function problemError(resp) {
  const p = resp.problem() || {};
  const code = String(p.code || `http_${resp.status}`);
  return errorFor(code, String(p.detail || ''), {
    status: resp.status,
    operationId: p.operation_id || resp.header('idempotency-operation') || null,
    state: p.state ?? null,
    statusUrl: p.status_url ?? null,
    retryAfter: resp.retryAfter() || null,
    problem: p,
  });
}

/** The 202 of an operation waiting for its approval, as an error. */
export function approvalRequired(resp) {
  const b = resp.json() || {};
  return new ApprovalRequired(String(b.code || 'approval_required'), String(b.detail || ''), {
    approval: b.approval || {}, status: 202, operationId: b.operation_id || null, state: b.state ?? null,
    statusUrl: b.status_url ?? null, problem: b,
  });
}

/**
 * One action under one key, as its block sees it: `replayed` is false
 * there (the block runs only for the owner), `operationId`, `fence`,
 * `leaseUntil`; `signal` aborts when the lease is lost. `succeed(result)`
 * and `fail(result)` record the outcome at once; a block that returns
 * without either records succeeded with what it returned.
 */
export class Operation {
  constructor(client, name, key, command, opts = {}) {
    if (typeof name !== 'string' || !NAME.test(name)) {
      throw new IdemgateError('invalid_action', `action name ${JSON.stringify(name)}: want [a-z0-9][a-z0-9._-]{0,127}`);
    }
    checkKey(key);
    this.name = name;
    this.key = key;
    this.command = command === undefined ? null : command;
    this.intent = opts.intent || null;
    this._body = canonical(this.command, 'invalid_command'); // refused before anything is sent
    this._client = client;
    this._wait = opts.wait ?? client.wait;
    this._approvalWait = opts.approvalWait ?? 0;
    this.replayed = false;
    this.result = null;
    this.operation = {};
    this.duplicateOf = null;
    this.fence = null;
    this.leaseUntil = '';
    this._token = '';
    this._lease = 0; // ms
    this._ended = false;
    this._lost = null;
    this._owner = Promise.resolve(); // one owner step at a time: heartbeats and the rest
    this._beat = null;
    this._stopped = false;
    this._abort = new AbortController();
  }

  get operationId() {
    return String(this.operation.id || '');
  }

  get state() {
    return String(this.operation.state || '');
  }

  /** A heartbeat or a step was answered lease_lost: this process no longer owns the effect. */
  get lost() {
    return this._lost !== null;
  }

  /** Aborted when the lease is lost: pass it to the effect's own calls. */
  get signal() {
    return this._abort.signal;
  }

  // -- reserve

  async reserve() {
    const c = this._client;
    const path = `${CONTROL}/actions/${encodeURIComponent(this.name)}`;
    const started = Date.now();
    const waitUntil = started + Math.max(0, this._wait);
    const approvalUntil = started + Math.max(0, this._approvalWait);
    let prefer = 0;
    let n = 1;
    for (;;) {
      const h = { ...c._auth(), 'Idempotency-Key': this.key, 'Content-Type': 'application/json' };
      if (prefer) h.Prefer = `wait=${prefer}`;
      const sentAt = Date.now();
      let resp;
      try {
        resp = await c._transport.request('POST', path, this._body, h);
      } catch (t) {
        if (!(t instanceof TransportError)) throw t;
        // A reserve changes nothing in the world, so it is sent again
        // with the same key; if the lost one did reserve, the resend
        // meets it in progress and waits for it.
        n = await this._pause(n, started, 0, new Unavailable('gateway_unreachable', t.reason));
        continue;
      }
      if (resp.status === 201) return this._own(resp);
      if (resp.status === 200) return this._replay(resp);
      if (resp.status === 202) {
        // Waiting for a human: the gateway holds a request sent with
        // Prefer: wait until the decision, within the approval wait.
        if (prefer && Date.now() - sentAt < 1000) await sleep(Math.min(1000, approvalUntil - Date.now()));
        prefer = waitFor(approvalUntil, c._transport.timeout);
        if (!prefer) throw approvalRequired(resp);
        continue;
      }
      if (resp.code() === 'in_progress') {
        // Wait for the owner; one answered at once although asked to wait
        // (a lapsed lease the sweep has not made unknown yet) is sent
        // again after a pause, never in a spin.
        if (prefer && Date.now() - sentAt < 1000) {
          await sleep(Math.min(Math.max(resp.retryAfter() * 1000, 200), Math.max(0, waitUntil - Date.now())));
        }
        prefer = waitFor(waitUntil, c._transport.timeout);
        if (!prefer) throw problemError(resp);
        continue;
      }
      if (transient(resp)) {
        n = await this._pause(n, started, resp.retryAfter() * 1000, problemError(resp));
        continue;
      }
      throw problemError(resp);
    }
  }

  async _pause(n, started, retryAfter, err) {
    const p = this._client.policy;
    const delay = Math.max(p.backoff(n), retryAfter);
    if (n >= p.maxAttempts || Date.now() + delay - started > p.maxElapsed) throw err;
    await sleep(delay);
    return n + 1;
  }

  _own(resp) {
    const body = resp.json() || {};
    const lease = body.lease || {};
    this.operation = body.operation || {};
    this._token = String(lease.token || '');
    this.fence = lease.fence ?? null;
    this.leaseUntil = String(lease.until || '');
    if (!this._token || this.fence === null) {
      throw new IdemgateError('bad_answer', "the gateway's 201 carried no lease", { status: 201, operationId: this.operationId || null });
    }
    this._lease = leaseMs(this.operation, this.leaseUntil);
    this._schedule(Math.max(this._lease / 3, 50));
  }

  _replay(resp) {
    const body = resp.json() || {};
    this.replayed = true;
    this.operation = body.operation || {};
    this.result = body.result ?? null;
    this.duplicateOf = resp.header('idempotency-duplicate-of') || null;
  }

  // -- owner steps

  /** Records the effect as done, with its result (JSON) and its reference in the world. */
  async succeed(result = null, { resultRef } = {}) {
    const body = { state: 'succeeded', result };
    if (resultRef != null) body.result_ref = String(resultRef);
    await this._complete(body, result);
  }

  /** Records a definite failure: every later call with the key gets it replayed. */
  async fail(result = null) {
    await this._complete({ state: 'failed', result }, result);
  }

  async _complete(body, result) {
    canonical(result, 'invalid_result'); // refused before sending, the lease still held
    await this._end('complete', body);
    this.result = result;
  }

  /** Releases the operation: the effect definitely did not happen, and the next call runs it. */
  release(reason = 'not performed') {
    return this._end('release', { reason: note(reason) });
  }

  /** Marks the operation unknown: the effect may have happened; it is never run again blind. */
  markUnknown(reason = 'unknown') {
    return this._end('unknown', { reason: note(reason) });
  }

  async _end(step, body) {
    if (!this._token) {
      const why = this.replayed ? 'it was replayed' : 'it is not reserved';
      throw new IdemgateError('not_owner', `this process does not own operation ${this.operationId}: ${why}`);
    }
    if (this._ended) {
      throw new IdemgateError('already_ended', `operation ${this.operationId} was already completed, released or marked unknown here`);
    }
    await this._locked(async () => {
      if (this._lost) throw this._lost;
      await this._step(step, body);
      this._ended = true;
    });
    this._stop();
  }

  _locked(fn) {
    const run = this._owner.then(fn);
    this._owner = run.catch(() => {});
    return run;
  }

  /**
   * One fenced step, sent again on a lost answer or a "not now": the
   * gateway answers a step repeated with the same token and fence as the
   * one already made. The caller holds the owner lock.
   */
  async _step(step, extra, { attempts, timeout } = {}) {
    const c = this._client;
    const data = canonical({ ...extra, token: this._token, fence: this.fence }, 'invalid_result');
    const path = `${CONTROL}/operations/${encodeURIComponent(this.operationId)}/${step}`;
    const started = Date.now();
    let n = 1;
    for (;;) {
      let resp;
      try {
        resp = await c._transport.request('POST', path, data, { ...c._auth(), 'Content-Type': 'application/json' }, timeout);
      } catch (t) {
        if (!(t instanceof TransportError)) throw t;
        const err = new Unavailable('gateway_unreachable', `${step}: ${t.reason}`, { operationId: this.operationId });
        n = await this._stepPause(n, started, 0, err, attempts);
        continue;
      }
      if (resp.status === 200) {
        const answer = resp.json() || {};
        this.operation = answer.operation || this.operation;
        return answer;
      }
      if (resp.code() === 'lease_lost') {
        this._lost = problemError(resp);
        this._abort.abort(this._lost);
        throw this._lost;
      }
      if (transient(resp)) {
        n = await this._stepPause(n, started, resp.retryAfter() * 1000, problemError(resp), attempts);
        continue;
      }
      throw problemError(resp);
    }
  }

  _stepPause(n, started, retryAfter, err, attempts) {
    if (attempts !== undefined && n >= attempts) throw err;
    return this._pause(n, started, retryAfter, err);
  }

  // -- heartbeats: about every third of the lease while the block runs

  _schedule(delay) {
    if (this._stopped) return;
    this._beat = setTimeout(() => this._heartbeat(), delay);
    this._beat.unref?.();
  }

  _heartbeat() {
    this._beatRun = this._locked(async () => {
      if (this._stopped || this._ended) return;
      let answer;
      try {
        answer = await this._step('heartbeat', {}, { attempts: 1, timeout: Math.max(this._lease, 1000) });
      } catch (e) {
        if (e instanceof LeaseLost) return; // marked lost; the block's end throws it
        this._schedule(Math.max(this._lease / 10, 50)); // again soon, while the lease may hold
        return;
      }
      this.leaseUntil = String((answer.lease || {}).until || this.leaseUntil);
      this._schedule(Math.max(this._lease / 3, 50));
    });
  }

  _stop() {
    this._stopped = true;
    clearTimeout(this._beat);
  }

  // -- the end of the block

  /** Records how the block ended (see Client.action) and returns or throws accordingly. */
  async finish(outcome) {
    try {
      if (this._ended) {
        // The block recorded its outcome itself (succeed, fail): what it
        // recorded is the result, as a replay will return it.
        if (outcome.error) throw outcome.error;
        return this.result;
      }
      if (!outcome.error) {
        if (this._lost) throw this._lost;
        const value = outcome.value === undefined ? null : outcome.value;
        try {
          canonical(value, 'invalid_result');
        } catch (e) {
          await this._quietly('unknown', { reason: 'the block returned a value that is not JSON' });
          throw e;
        }
        await this._end('complete', { state: 'succeeded', result: value });
        this.result = value;
        return value;
      }
      const err = outcome.error;
      if (err instanceof LeaseLost || this._lost) throw err; // the gateway's sweep makes it unknown
      if (err instanceof NotPerformed) await this._quietly('release', { reason: note(err.reason) });
      else await this._quietly('unknown', { reason: `the block threw ${typeName(err)}` });
      throw err;
    } finally {
      this._stop();
    }
  }

  // An owner step on the way out of a block that threw: the block's error
  // is what the caller must see, so this step's own failure is kept on
  // the operation (exitError), not thrown over it.
  async _quietly(step, body) {
    try {
      await this._end(step, body);
    } catch (e) {
      if (!(e instanceof IdemgateError)) throw e;
      this.exitError = e;
    }
  }
}

/** A reason within the gateway's bound: a longer one would be refused, and the step with it. */
export function note(reason) {
  const r = String(reason || 'not performed');
  return r.length <= MAX_NOTE ? r : r.slice(0, MAX_NOTE - 1) + '\u2026';
}

// An error's class name, never its message (which may hold a recipient, a
// token or a payload).
function typeName(e) {
  return (e && e.constructor && e.constructor.name) || typeof e;
}

// The Prefer: wait of the next request that waits (seconds): what is left
// of the budget, at most half the client's timeout (so that the answer
// comes before the timeout) and the gateway's cap of 60 s; 0 once less
// than a second is left.
function waitFor(until, timeoutMs) {
  const left = (until - Date.now()) / 1000;
  const cap = timeoutMs > 0 ? Math.min(60, timeoutMs / 2000) : 60;
  return left >= 1 ? Math.floor(Math.min(left, cap)) : 0;
}

// The action's lease in ms, from the gateway's own clock where it can (the
// lease's end less the reservation's time), so that a skewed local clock
// does not shorten the heartbeat's period.
function leaseMs(view, until) {
  const end = parseTime(until);
  const start = parseTime(view.updated_at) || parseTime(view.created_at);
  if (end && start && end > start) return end - start;
  if (end) return Math.max(300, end - Date.now());
  return 1000;
}
