// Writes through the gateway, keyed by intents kept in the journal: the Go
// agent's Do (agent.Client.Do), as the Python client writes it, rule for
// rule. An intent maps to a key made once (derived from the agent's
// secret, so that a lost journal makes the same key again) and written to
// the journal before the first request leaves; each error family gets the
// workflow article's retry; an answer lost after sending is reconciled
// with the gateway (a lookup by key), never sent again blind; and an
// unknown outcome is never retried.

import { canonical, fingerprint } from './canonical.js';
import { Conflict, IdemgateError } from './errors.js';
import { SENT_MAYBE, SENT_NO, SENT_YES, NotSettled } from './journal.js';
import {
  ApprovalInfo, CONFLICT, CREATED, FAILED, IN_PROGRESS, NEEDS_APPROVAL, Outcome, REJECTED, REPLAYED,
  UNAUTHORIZED, UNKNOWN, isFinal,
} from './outcome.js';
import { CONTROL } from './action.js';
import { TransportError } from './transport.js';
import { sleep } from './util.js';

export const MODES = ['resume', 'repeat', 'revise'];
/** A request that waits for a human's decision asks the gateway to hold it at most this long (s). */
const MAX_APPROVAL_WAIT = 60;

// What the policy makes of an attempt (agent.step).
const DONE = 0;
const RETRY = 1;
const RECONCILE = 2;
const WAIT_STATUS = 3;
const ASK = 4;
const WAIT_APPROVAL = 5;

const TRANSIENT_CODES = new Set(['store_unavailable', 'upstream_unavailable', 'rate_limited', 'concurrency_locked']);

/** What one request (or one lookup) came back with. */
class Attempt {
  constructor() {
    this.status = 0;
    this.code = '';
    this.headers = {};
    this.body = Buffer.alloc(0);
    this.err = ''; // a transport error, in words
    this.sent = false; // the request may have reached the gateway
    this.note = ''; // what reconciliation found, in words
    this.asked = false; // the gateway answered a lookup by key
    this.found = false; // and it holds an operation under the key
    this.lookupErr = ''; // the lookup failed: the gateway could not say
    this.expired = false; // it no longer holds it, or may have purged it
    this.retryAfter = 0; // ms
    this.approval = null;
    this.accepted = ''; // a 202's code: approval_required or approval_expired
  }

  replayed() {
    return !this.err && this.headers['idempotent-replayed'] === 'true';
  }

  delivery() {
    if (this.found) return SENT_YES;
    if (this.asked) return SENT_NO;
    if (this.err && !this.sent) return SENT_NO;
    if (this.err || this.status === 0) return SENT_MAYBE;
    return SENT_YES;
  }

  // "Not now", nothing applied: a rate limit, a store or upstream
  // unavailable, a concurrency group held, an upstream's 408/409/425/429
  // the gateway released.
  transient() {
    if (this.err) return !this.sent;
    if (TRANSIENT_CODES.has(this.code)) return true;
    if (this.code || this.replayed()) return false;
    return [429, 408, 409, 425].includes(this.status);
  }

  answer() {
    let detail = '';
    if (this.code) {
      try {
        const p = JSON.parse(this.body.toString('utf8'));
        detail = p && typeof p === 'object' ? String(p.detail || '') : '';
      } catch { /* no detail */ }
    }
    let s = `answered ${this.status}`;
    if (this.replayed()) s = `the gateway replayed the stored answer, ${this.status}`;
    if (this.code) s += ` ${this.code}`;
    if (detail) s += `: ${detail}`;
    if (this.retryAfter > 0) s += ` (retry after ${this.retryAfter / 1000}s)`;
    return s;
  }

  reasonText() {
    let first = '';
    if (this.err && this.sent) first = `the answer was lost (${this.err})`;
    else if (this.err) return `gateway unreachable: ${this.err}`;
    else if (this.status === 202 && this.approval && !this.note && !this.lookupErr) return acceptedReason(this.status, this.accepted, this.approval);
    else if (this.status > 0 && !this.note && !this.lookupErr) return this.answer();
    else if (this.status > 0) first = this.answer();
    if (this.lookupErr) return join(first, `the gateway could not be asked what became of it (${this.lookupErr})`);
    return join(first, this.note);
  }
}

function acceptedReason(status, code, a) {
  let s = `answered ${status}`;
  if (code) s += ` ${code}`;
  s += code === 'approval_expired' ? ': the earlier approval request expired undecided, and a new one was opened for the same operation;' : ':';
  return `${s} ${a.waiting()}`;
}

function join(a, b) {
  return !a || !b ? a + b : `${a}; ${b}`;
}

/** The workflow article's table of error families (agent.decide). */
function decide(a) {
  if (a.err && !a.sent) return [RETRY, FAILED]; // nothing reached the gateway
  if (a.err) return [RECONCILE, UNKNOWN]; // a timeout or reset after sending: never blind
  if (a.transient()) return [RETRY, FAILED];
  if (a.code === 'in_progress') return [WAIT_STATUS, IN_PROGRESS];
  if (a.code === 'outcome_unknown') return [DONE, UNKNOWN];
  if (a.code === 'fingerprint_mismatch') return [DONE, CONFLICT];
  if (a.code === 'approval_denied') return [DONE, FAILED];
  if (a.status === 401 || a.status === 403) return [DONE, UNAUTHORIZED];
  if (a.status === 202 && a.approval) return [DONE, NEEDS_APPROVAL]; // the gateway's own 202
  if (a.status >= 200 && a.status < 300) return [DONE, a.replayed() ? REPLAYED : CREATED];
  if (a.status >= 400 && a.status < 500) return [DONE, REJECTED];
  if (a.replayed()) return [DONE, FAILED]; // a stored 5xx the route declares final
  return [RECONCILE, UNKNOWN]; // any other 5xx: ask before sending again
}

// What the gateway's view of an operation it holds means (agent.judge):
// sent again when not applied, or when final (the resend is answered from
// its record, which is how the stored answer is fetched).
function judge(v, a, now) {
  const ap = (a.approval = ApprovalInfo.of(v.approval));
  const state = v.state;
  if (state === 'prepared' && !ap) {
    a.note = 'the gateway holds it not applied (released)';
    return [RETRY, FAILED];
  }
  if (state === 'prepared' && ap.lapsed(now)) {
    a.note = ap.lapsedNote();
    return [RETRY, NEEDS_APPROVAL];
  }
  if (state === 'prepared' && ap.status === 'pending') {
    a.note = `it waits for a human's approval at the gateway: ${ap.waiting()}`;
    return [DONE, NEEDS_APPROVAL];
  }
  if (state === 'prepared') {
    a.note = `the gateway holds it not applied, and its approval is ${ap.status}: sending it again (the same key) runs it`;
    return [RETRY, FAILED];
  }
  if (state === 'succeeded') {
    a.note = 'the gateway says it succeeded';
    return [RETRY, REPLAYED];
  }
  if (state === 'failed') {
    a.note = 'the gateway says it failed';
    return [RETRY, FAILED];
  }
  if (state === 'executing') {
    a.note = 'it is still executing at the gateway';
    return [WAIT_STATUS, IN_PROGRESS];
  }
  a.note = `the gateway holds it ${state}: it may have been applied`;
  return [DONE, UNKNOWN];
}

// An operation the gateway no longer holds (its retention passed):
// nothing is sent, since the gateway would perform it anew.
function expired(known, a) {
  a.expired = true;
  const gone = `the gateway no longer holds operation ${known.operationId} (its retention has passed)`;
  if (known.kind === CREATED || known.kind === REPLAYED) {
    a.note = `done; ${gone}, so its answer cannot be replayed; use repeat for a new, identical action`;
    return [DONE, known.kind];
  }
  if (isFinal(known.kind)) {
    a.note = `${gone} and this journal last saw it ${known.kind}: it is not sent again; a new action needs repeat or revise`;
    return [DONE, known.kind];
  }
  a.note = `${gone} and this journal last saw it ${known.kind}: it is not sent again. Check the upstream by hand; if the action is still needed, name a new intent`;
  return [DONE, UNKNOWN];
}

/**
 * The journal entry a request or an action runs under (agent.Client.entry):
 * found, or made and written before anything is sent. `method` and `path`
 * name what the intent does ("ACTION" and the action's name for an
 * action), `fp` binds it to one command.
 */
export async function entryFor(client, intent, method, path, fp, mode) {
  if (!intent || typeof intent !== 'string') throw new IdemgateError('invalid_action', 'an intent names the action');
  if (!MODES.includes(mode)) throw new IdemgateError('invalid_action', `mode ${JSON.stringify(mode)} (want resume, repeat or revise)`);
  const j = await client._journal();
  const keys = client._keys();
  const keyFor = (name, version) => keys.key(name, version);
  const latest = await j.latest(intent);
  if (!latest && mode !== 'revise') return created(j, intent, 1, method, path, fp, keyFor);
  if (!latest) throw new IdemgateError('no_intent', `intent ${JSON.stringify(intent)}: no such intent in the journal`);
  if (mode === 'resume') {
    if (latest.fingerprint !== fp) {
      throw new Conflict('payload_changed', `intent ${JSON.stringify(intent)}: the request differs from the one this intent was created with; use revise for changed parameters`);
    }
    return latest;
  }
  if (latest.attempts > 0 && !isFinal(latest.lastKind)) {
    throw new IdemgateError('not_settled', `intent ${JSON.stringify(latest.intent)} is ${latest.lastKind || 'unrecorded'}: reconcile it before a new action (status(), or an operator's resolution)`);
  }
  if (mode === 'repeat') {
    if (latest.fingerprint !== fp) throw new Conflict('payload_changed', `intent ${JSON.stringify(intent)}: repeat means an identical action, use revise`);
    try {
      return await j.createRepeat(intent, method, path, fp, keyFor);
    } catch (e) {
      if (e instanceof NotSettled) throw new IdemgateError('not_settled', `${e.message}: reconcile it before a new action`);
      throw e;
    }
  }
  if (latest.fingerprint === fp) throw new IdemgateError('invalid_action', `revise of intent ${JSON.stringify(intent)} changes nothing; resume it, or repeat it`);
  return created(j, intent, latest.version + 1, method, path, fp, keyFor);
}

async function created(j, intent, version, method, path, fp, keyFor) {
  const e = await j.create(intent, version, method, path, fp, keyFor);
  if (e.fingerprint !== fp || e.method !== method || e.path !== path) {
    throw new Conflict('payload_changed', `intent ${JSON.stringify(intent)} was just created by another caller with another request`);
  }
  return e;
}

/** client.request: see Client.request. */
export async function request(client, { method, path, body, intent, mode = 'resume', approvalWait }) {
  if (!method || typeof path !== 'string' || !path.startsWith('/')) {
    throw new IdemgateError('invalid_action', 'want a method and a path starting with /');
  }
  method = method.toUpperCase();
  const data = body === undefined || body === null ? null : canonical(body);
  const command = data === null ? null : JSON.parse(data);
  const fp = fingerprint(method, path, 'agent', command);
  const e = await entryFor(client, intent, method, path, fp, mode);
  const policy = approvalWait === undefined ? client.policy : client.policy.with({ approvalWait });
  return new Run(client, e, data, policy).go();
}

/** One request() call: what it sends, what the gateway last said, and what the policy does next (agent.runState). */
class Run {
  constructor(c, e, body, p) {
    this.c = c;
    this.e = e;
    this.body = body;
    this.p = p.with({ wait: c._clampWait(p.wait) });
    this.s = RETRY;
    this.stale = false;
    this.informed = e.lastKind;
    this.why = '';
    this.kind = '';
    this.num = 0;
    this.approval = null;
    this.out = new Outcome({
      kind: e.lastKind, intent: e.intent, version: e.version, key: e.key, operationId: e.operationId,
      attempts: e.attempts, status: e.lastStatus, sent: e.sent,
    });
    this.approvalBy = 0;
    this.nextWait = 0;
    this.waitSent = false;
    this.polls = 0;
    this.waited = 0;
  }

  async go() {
    if (this.e.attempts > 0) {
      // A resume first asks the gateway what became of it.
      this.s = ASK;
      const last = await (await this.c._journal()).lastSentAttempt(this.e.key);
      this.stale = !!last && Date.now() - last >= this.p.gatewayRetention;
    }
    const start = Date.now();
    for (let n = 1; ;) {
      const began = Date.now();
      const a = await this.tryOnce();
      await this.settle(a);
      if (this.s === DONE) return this.out;
      if (this.s === WAIT_APPROVAL) {
        // Its own budget: a human's time is not the retry policy's.
        const pause = this.approvalPause(began, a);
        if (pause === null) {
          this.out.reason += `; no decision within the approval wait (${this.p.approvalWait / 1000}s)`;
          return this.out;
        }
        this.waited += Date.now() - began + pause;
        await sleep(pause);
        continue;
      }
      const delay = Math.max(this.p.backoff(n), a.retryAfter);
      if (n >= this.p.maxAttempts || Date.now() + delay - start - this.waited > this.p.maxElapsed) {
        this.out.reason += `; gave up after ${n} ${n === 1 ? 'try' : 'tries'} (the retry budget)`;
        return this.out;
      }
      await sleep(delay);
      n++;
    }
  }

  async tryOnce() {
    let a = new Attempt();
    this.kind = this.informed;
    this.num = 0;
    if (this.s === ASK) [this.s, this.kind] = await this.c._reconcile(this.e.key, this.out, this.stale, a);
    this.waitSent = false;
    if (this.s === RETRY || this.s === WAIT_STATUS || this.s === WAIT_APPROVAL) {
      // Prefer: wait only to wait: the gateway holds any request that
      // meets a pending approval for its decision.
      let wait = 0;
      if (this.s === WAIT_STATUS) wait = this.p.wait;
      else if (this.s === WAIT_APPROVAL) {
        wait = this.nextWait;
        this.waitSent = true;
      }
      this.num = await (await this.c._journal()).beginAttempt(this.e.key); // written before it is sent
      a = await this.c._send(this.e, this.body, wait);
      this.stale = false;
      [this.s, this.kind] = decide(a);
      if (this.s === RECONCILE) [this.s, this.kind] = await this.c._reconcile(this.e.key, this.out, false, a);
    }
    if (this.s === DONE && this.kind === NEEDS_APPROVAL && this.p.approvalWait > 0) this.s = WAIT_APPROVAL;
    return a;
  }

  // Records what the try came to, and makes the outcome the journal's word.
  async settle(a) {
    const reached = (this.num > 0 && !a.transient()) || (this.num === 0 && a.asked);
    this.out._fill(a, this.kind, this.num, reached);
    if (a.code === 'approval_denied' && this.approval) {
      this.out.reason = join(this.out.reason, `the approval it waited for was ${this.approval.what()}`);
    }
    if (reached) {
      this.informed = this.kind;
      this.why = this.out.reason;
      this.approval = this.out.approval;
    } else if (this.informed) {
      this.out.kind = this.informed;
      this.out.approval = this.approval;
      const before = this.why ? `before that, ${this.why}` : `the journal last recorded ${this.informed}`;
      this.out.reason = join(this.out.reason, before);
    }
    const j = await this.c._journal();
    const e = await j.record(this.e.key, this.num, this.out.kind, this.out.status, this.out.operationId, reached, a.delivery());
    this.out._adopt(e);
    this.out.unfinished = this.s !== DONE || !!a.lookupErr;
  }

  // The pause before the next request that waits for the human's
  // decision (null once approvalWait is spent): none after a request the
  // gateway held, a growing one after one it answered at once.
  approvalPause(began, a) {
    const now = Date.now();
    if (!this.approvalBy) this.approvalBy = now + this.p.approvalWait;
    let pause = 0;
    if (this.waitSent && now - began < 1000) {
      this.polls++;
      pause = Math.max(this.p.backoff(this.polls), a.retryAfter);
    } else {
      this.polls = 0;
    }
    const w = Math.floor(this.c._clampWait(Math.min(this.approvalBy - (now + pause), MAX_APPROVAL_WAIT * 1000)) / 1000) * 1000;
    if (w < 1000) return null;
    this.nextWait = w;
    return pause;
  }
}

/** The wire side of request(), mixed into Client. */
export const wire = {
  async _send(e, body, waitMs) {
    const a = new Attempt();
    const h = { ...this._auth(), 'Idempotency-Key': e.key };
    if (waitMs >= 1000) h.Prefer = `wait=${Math.floor(waitMs / 1000)}`;
    if (body) h['Content-Type'] = 'application/json';
    let resp;
    try {
      resp = await this._transport.request(e.method, e.path, body, h);
    } catch (t) {
      if (!(t instanceof TransportError)) throw t;
      a.err = t.reason;
      a.sent = t.sent;
      return a;
    }
    a.sent = true;
    a.status = resp.status;
    a.headers = resp.headers;
    a.body = resp.body;
    a.retryAfter = resp.retryAfter() * 1000;
    a.code = resp.code();
    if (a.status === 202) {
      const v = resp.json();
      if (v && typeof v === 'object') {
        a.approval = ApprovalInfo.of(v.approval, true);
        a.accepted = String(v.code || '');
      }
    }
    return a;
  },

  // The gateway's view of the operation under key (null: it holds none,
  // a not_found problem), or the reason it could not say. Any answer but
  // not_found is an error, never taken for "not applied".
  async _lookup(key) {
    let resp;
    try {
      resp = await this._transport.request('GET', `${CONTROL}/operations?key=${encodeURIComponent(key)}`, null, { ...this._auth(), Accept: 'application/json' });
    } catch (t) {
      if (!(t instanceof TransportError)) throw t;
      return [null, t.reason];
    }
    const p = resp.problem();
    if (p && p.code === 'not_found' && resp.status === 404) return [null, ''];
    if (Math.floor(resp.status / 100) !== 2) {
      let s = `its lookup answered ${resp.status}`;
      if (p && p.code) s += ` ${p.code}${p.detail ? ': ' + p.detail : ''}`;
      return [null, s];
    }
    const v = resp.json();
    if (!v || typeof v !== 'object' || !v.state) return [null, `its lookup answered ${resp.status} with no operation`];
    return [v, ''];
  },

  // Asks the gateway about the operation under key, after an answer lost
  // once sent, or before resuming an intent sent before. It sends again
  // only when the gateway says the operation was not applied (none, or
  // prepared) or is final.
  async _reconcile(key, known, stale, a) {
    const [v, err] = await this._lookup(key);
    a.note = '';
    a.asked = !err;
    a.lookupErr = err;
    if (err) {
      if (isFinal(known.kind) && !a.sent) return [DONE, known.kind]; // a resume of a settled intent
      return [ASK, UNKNOWN]; // ask again later; never resend unasked
    }
    a.found = v !== null;
    const j = await this._journal();
    if (v) {
      a.headers = { 'idempotency-operation': String(v.id || '') };
      const r = judge(v, a, Date.now());
      await j.settle(key, SENT_YES);
      return r;
    }
    if (known.operationId) return expired(known, a);
    if (stale) {
      a.expired = true;
      a.note = "sent more than the gateway's retention ago with no answer recorded, and the gateway holds nothing now: it may have been performed and purged, so it is not sent again. Check the upstream by hand; if the action is still needed, name a new intent";
      return [DONE, UNKNOWN];
    }
    a.note = 'the gateway holds nothing under this key: it was not applied';
    await j.settle(key, SENT_NO);
    return [RETRY, FAILED];
  },

  // Keeps Prefer: wait under half the client's timeout, so that a wait
  // ends in an answer, not a timeout.
  _clampWait(ms) {
    const t = this._transport.timeout;
    return t > 0 ? Math.min(ms, t / 2) : ms;
  },
};

/** agent.Client.statusOf, then Status.Kind and Status.Outcome. */
export async function status(c, e) {
  const at = Date.now();
  const [view, err] = await c._lookup(e.key);
  let gone = false;
  const unasked = !!err;
  let problem = '';
  if (err) problem = `the gateway could not be asked: ${err}`;
  else if (!view && e.operationId) {
    gone = true;
    problem = `the gateway no longer holds operation ${e.operationId}: its retention has passed`;
  } else if (!view) {
    const last = await (await c._journal()).lastSentAttempt(e.key);
    if (last && at - last >= c.policy.gatewayRetention) {
      gone = true;
      problem = "the gateway holds nothing under this intent's key, and its last send is older than the gateway's retention: it may have been performed and purged";
    } else {
      problem = "the gateway has no operation under this intent's key: it was never reserved";
    }
  }
  const state = (view && view.state) || '';
  const ap = ApprovalInfo.of(view && view.approval);
  const awaits = state === 'prepared' && !!ap && ap.status === 'pending' && !ap.lapsed(at);
  const o = new Outcome({
    kind: statusKind(e, state, ap, awaits, gone, unasked, !!view, at), intent: e.intent, version: e.version,
    key: e.key, operationId: e.operationId, status: e.lastStatus,
    body: view ? Buffer.from(JSON.stringify(view)) : Buffer.alloc(0), attempts: e.attempts, sent: e.sent,
    reason: problem, expired: gone,
  });
  if (state) {
    o.reason = `the gateway holds it ${state}`;
    o.approval = ap;
    if (awaits) o.reason += `, waiting for a human's approval: ${ap.waiting()}`;
    else if (state === 'prepared' && ap && ap.lapsed(at)) o.reason += `; ${ap.lapsedNote()}`;
    else if (state === 'prepared' && ap) o.reason += `, and its approval is ${ap.status}: resuming this intent (the same key) runs it`;
  }
  if (unasked && e.lastKind) o.reason += `; the journal last recorded ${e.lastKind}`;
  o.unfinished = unasked || (!gone && (!view || (state === 'prepared' && !awaits)));
  return o;
}

function statusKind(e, state, ap, awaits, gone, unasked, found, at) {
  const last = e.lastKind;
  if (state === 'executing') return IN_PROGRESS;
  if (state === 'unknown') return UNKNOWN;
  if (state === 'prepared') return awaits || (ap && ap.lapsed(at)) ? NEEDS_APPROVAL : FAILED;
  if (state === 'succeeded') return last === CREATED || last === REPLAYED ? last : REPLAYED;
  if (state === 'failed') return last === REJECTED ? REJECTED : FAILED;
  if (gone && !isFinal(last)) return UNKNOWN;
  if (!found && !gone && !unasked && last && !isFinal(last)) return FAILED; // never reserved
  return last;
}
