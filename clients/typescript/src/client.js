// The client: one gateway, one principal's token, a journal of intents.

import { canonical, digest } from './canonical.js';
import { ApprovalRequired, Conflict, IdemgateError, NotPerformed, OutcomeUnknown } from './errors.js';
import { Journal, defaultPath, SENT_MAYBE, SENT_YES } from './journal.js';
import { keysFor } from './keys.js';
import { Operation } from './action.js';
import { entryFor, request, status, wire } from './request.js';
import { Transport } from './transport.js';
import { Policy, ulid } from './util.js';

/**
 * A run the gateway receives as written in Idempotency-Run (agent.CheckRun):
 * 1 to 255 bytes of printable UTF-8, no surrounding spaces.
 */
export function checkRun(run) {
  if (!run || Buffer.byteLength(run, 'utf8') > 255) throw new IdemgateError('invalid_run', 'want 1 to 255 bytes');
  if (run !== run.trim() || /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u.test(run)) {
    throw new IdemgateError('invalid_run', `${JSON.stringify(run)} starts or ends with a space, or has a non-printing character`);
  }
}

/**
 * A client of one idemgate gateway, as the principal `token` names.
 * Every duration is in milliseconds. See README.md for the options.
 */
export class Client {
  constructor({
    url, token, journal, timeout = 30_000, wait = 30_000, policy, run, secret, secretFile, agent, httpAgent,
  } = {}) {
    if (!url) throw new IdemgateError('invalid_url', "no url: the gateway's base URL, e.g. http://127.0.0.1:8080");
    if (!token) throw new IdemgateError('unauthorized', "no token: the gateway needs a principal's bearer token");
    if (run != null) checkRun(run);
    this.url = url;
    this.token = token;
    this.timeout = timeout;
    this.wait = wait;
    this.policy = policy instanceof Policy ? policy : new Policy(policy || {});
    this.run = run || `run_${ulid()}`;
    this._transport = new Transport(url, { timeout, agent: httpAgent });
    this._journalOpt = journal;
    this._journalP = null;
    this._keyConfig = [secret, secretFile, agent];
    this._keysObj = null;
  }

  /** The journal, opened on first use. */
  _journal() {
    if (!this._journalP) {
      const j = this._journalOpt;
      this._journalP = j instanceof Journal ? Promise.resolve(j) : Journal.open(j || defaultPath());
      this._journalP.catch(() => { this._journalP = null; });
    }
    return this._journalP;
  }

  /** The agent's keys, read from its secret on first use. */
  _keys() {
    if (!this._keysObj) this._keysObj = keysFor(...this._keyConfig);
    return this._keysObj;
  }

  _auth() {
    return { Authorization: `Bearer ${this.token}`, 'Idempotency-Run': this.run };
  }

  /** Closes the connections and the journal (a journal passed in is the caller's to close). */
  async close() {
    this._transport.close();
    if (this._journalP && !(this._journalOpt instanceof Journal)) {
      const j = await this._journalP.catch(() => null);
      this._journalP = null;
      if (j) await j.close();
    }
  }

  /**
   * An effect this process performs itself, registered under `key` (the
   * caller's stable key) or `intent` (a name whose key is derived from the
   * agent's secret and kept in the journal with the command's fingerprint:
   * a changed command under a used intent is refused before anything is
   * sent). `fn(op)` runs only in the process that owns the operation,
   * under a lease kept by heartbeats; what it returns (JSON) is recorded
   * and returned. A replay returns the recorded result without running it.
   * `fn` throwing NotPerformed releases the operation; any other throw
   * records unknown; either is thrown on.
   */
  async action(name, opts, fn) {
    return (await this.perform(name, opts, fn)).result;
  }

  /**
   * client.action, returning { result, replayed, operationId, state, key }
   * instead of the result alone.
   */
  async perform(name, { key, intent, command = null, mode = 'resume', wait, approvalWait } = {}, fn) {
    if (typeof fn !== 'function') throw new TypeError('client.action(name, options, fn): fn must be a function');
    if ((key == null) === (intent == null)) throw new IdemgateError('invalid_action', 'give a key or an intent, not both');
    let entry = null;
    let n = 0;
    if (intent != null) {
      const fp = digest({ action: name, command: command ?? null });
      entry = await entryFor(this, intent, 'ACTION', name, fp, mode);
      key = entry.key;
      n = await (await this._journal()).beginAttempt(key); // written before it is sent
    }
    const op = new Operation(this, name, key, command, { wait, approvalWait, intent });
    try {
      await op.reserve();
    } catch (e) {
      await this._note(entry, n, op, e);
      throw e;
    }
    if (op.replayed) {
      await this._note(entry, n, op, null, 'replayed', 200);
      return replayed(op);
    }
    let outcome;
    try {
      outcome = { value: await fn(op) };
    } catch (e) {
      outcome = { error: e };
    }
    try {
      const result = await op.finish(outcome);
      await this._note(entry, n, op, null, op.state === 'failed' ? 'failed' : 'created', 201);
      return { result, replayed: false, operationId: op.operationId, state: op.state, key };
    } catch (e) {
      await this._note(entry, n, op, e);
      throw e;
    }
  }

  // Records in the journal what an intent's action came to.
  async _note(entry, n, op, err, kind, status = 0) {
    if (!entry) return;
    let sent = SENT_YES;
    if (err) {
      status = err.status || 0;
      if (err instanceof NotPerformed) kind = 'failed';
      else if (err instanceof ApprovalRequired) kind = 'needs_approval';
      else if (err instanceof Conflict) kind = 'conflict';
      else if (err instanceof OutcomeUnknown) kind = 'unknown';
      else if (err instanceof IdemgateError && !op.operationId) {
        kind = err.code === 'approval_denied' ? 'failed' : err.status === 401 || err.status === 403 ? 'unauthorized' : 'failed';
        sent = err.status ? SENT_YES : SENT_MAYBE;
        if (!err.status) status = 0;
      } else kind = 'unknown';
    }
    const j = await this._journal();
    await j.record(entry.key, n, kind, status, op.operationId, status > 0, sent);
  }

  /**
   * A function made an action: `key(...args)` (or `intent(...args)`)
   * names it, `command(...args)` (default: the arguments, as a JSON array)
   * is fingerprinted with it, and its return value (JSON) is the recorded
   * result. A later call with the same key returns the recorded result
   * without running the function; both return it as JSON reads it back.
   */
  idempotent(fn, { action, key, intent, command, wait } = {}) {
    if (!action) throw new IdemgateError('invalid_action', 'idempotent(fn, { action, key }): name the action');
    if (!key === !intent) throw new IdemgateError('invalid_action', 'idempotent(fn, options): give key or intent, a function of the arguments');
    return async (...args) => {
      const cmd = command ? command(...args) : args;
      const opts = { command: cmd, wait };
      if (key) opts.key = key(...args);
      else opts.intent = intent(...args);
      return this.action(action, opts, async () => JSON.parse(canonical(await fn(...args), 'invalid_result')));
    };
  }

  /**
   * One write through the gateway under `intent`: its key is found in the
   * journal or made and written there before anything is sent, then the
   * request is sent with the policy's retries, every attempt recorded.
   * Everything the gateway says is the returned Outcome; it throws only
   * before sending (payload_changed, not_settled, invalid_action).
   */
  request(opts) {
    return request(this, opts);
  }

  /** What the journal and the gateway know of the intent's latest version (an Outcome); only a lookup is sent. */
  async status(intent) {
    const e = await (await this._journal()).latest(intent);
    if (!e) throw new IdemgateError('no_intent', `intent ${JSON.stringify(intent)}: no such intent in the journal`);
    return status(this, e);
  }

  /** The journal's intents still open, oldest first. */
  async pending() {
    return (await this._journal()).pending();
  }

  /** The gateway's view of the operation under key (null if it holds none). */
  async lookup(key) {
    const [v, err] = await this._lookup(key);
    if (err) throw new IdemgateError('lookup_failed', err);
    return v;
  }
}

Object.assign(Client.prototype, wire);

function replayed(op) {
  if (op.state === 'failed') {
    const err = new IdemgateError('action_failed', `operation ${op.operationId} was recorded failed`, {
      operationId: op.operationId, state: 'failed',
    });
    err.result = op.result;
    throw err;
  }
  return { result: op.result, replayed: true, operationId: op.operationId, state: op.state, key: op.key };
}

/** A function made an action of client (client.idempotent, with the client among the options). */
export function idempotent(fn, { client, ...options } = {}) {
  if (!(client instanceof Client)) throw new TypeError('idempotent(fn, { client, action, key }): give the client');
  return client.idempotent(fn, options);
}
