// What became of a request through the gateway (agent.Outcome), and the
// approval an operation waits for, in the Go agent's words.

import { FINAL_KINDS, SENT_MAYBE, SENT_NO } from './journal.js';
import { formatUTC, parseTime } from './util.js';

export const CREATED = 'created';
export const REPLAYED = 'replayed';
export const IN_PROGRESS = 'in_progress';
export const NEEDS_APPROVAL = 'needs_approval';
export const CONFLICT = 'conflict';
export const REJECTED = 'rejected';
export const UNAUTHORIZED = 'unauthorized';
export const UNKNOWN = 'unknown';
export const FAILED = 'failed';

/** The intent is settled: nothing it sent can still take effect on its own. */
export const isFinal = (kind) => FINAL_KINDS.has(kind);

/** The human decision an operation waits for, as the gateway named it. */
export class ApprovalInfo {
  constructor(v, withUrl = false) {
    this.id = String(v.id);
    this.status = String(v.status || '');
    this.summary = String(v.summary || '');
    this.expiresAt = String(v.expires_at || '');
    this.url = withUrl ? String(v.url || '') : '';
  }

  static of(v, withUrl = false) {
    return v && typeof v === 'object' && v.id ? new ApprovalInfo(v, withUrl) : null;
  }

  /** It can no longer be decided or used: the next identical request opens a new one. */
  lapsed(now) {
    const exp = parseTime(this.expiresAt);
    if (this.status === 'expired') return true;
    if (!exp) return false;
    return ['pending', 'approved', 'used'].includes(this.status) && now > exp;
  }

  what() {
    return this.summary ? `${JSON.stringify(this.summary)} (approval ${this.id})` : `this operation (approval ${this.id})`;
  }

  by() {
    const exp = parseTime(this.expiresAt);
    return exp ? ` before ${formatUTC(exp)}` : '';
  }

  waiting() {
    return `a human must approve ${this.what()}${this.by()}; nothing was sent to the API. Resuming this intent (the same key) runs it once approved, and never twice`;
  }

  lapsedNote() {
    let s = `its approval ${this.id}`;
    if (this.summary) s += ` for ${JSON.stringify(this.summary)}`;
    s += ' lapsed';
    const exp = parseTime(this.expiresAt);
    if (exp) s += ` at ${formatUTC(exp)}`;
    return s + ' before it ran; sending it again (the same key) opens a new one for the same operation';
  }
}

/**
 * What became of a request: `kind` and, in words, `reason`; `sent` says
 * whether anything reached the gateway ("no" means nothing can have
 * happened); `unfinished` that the retry budget ran out or the gateway
 * could not be asked, so resuming may change it; `nextStep` what to do.
 */
export class Outcome {
  constructor(f) {
    this.kind = f.kind || '';
    this.intent = f.intent;
    this.version = f.version;
    this.key = f.key;
    this.operationId = f.operationId || '';
    this.status = f.status || 0;
    this.body = f.body || Buffer.alloc(0);
    this.headers = f.headers || {};
    this.attempts = f.attempts || 0;
    this.sent = f.sent || SENT_NO;
    this.reason = f.reason || '';
    this.unfinished = !!f.unfinished;
    this.expired = !!f.expired;
    this.approval = f.approval || null;
  }

  /** The answer's body as JSON (null if empty or not JSON). */
  json() {
    try {
      return this.body.length ? JSON.parse(this.body.toString('utf8')) : null;
    } catch {
      return null;
    }
  }

  get final() {
    return isFinal(this.kind);
  }

  /** The write happened, exactly once (now or before). */
  get ok() {
    return this.kind === CREATED || this.kind === REPLAYED;
  }

  get nextStep() {
    return nextStep(this);
  }

  toJSON() {
    return {
      kind: this.kind, intent: this.intent, version: this.version, operation_id: this.operationId,
      status: this.status, attempts: this.attempts, sent: this.sent, reason: this.reason,
      unfinished: this.unfinished, next_step: this.nextStep, body: this.json(),
    };
  }

  _fill(a, kind, num, reached) {
    this.kind = kind;
    this.reason = a.reasonText();
    this.expired = a.expired;
    this.approval = a.approval;
    if (reached && num > 0) {
      this.status = a.status;
      this.body = a.body;
      this.headers = a.headers;
    }
    if (num > 0) this.attempts = num;
    const op = a.headers['idempotency-operation'];
    if (op) this.operationId = String(op);
  }

  // Makes the outcome the journal's word, which can say more than this
  // call saw (another process's answer, an earlier attempt that may have
  // been applied).
  _adopt(e) {
    if (e.lastKind !== this.kind) {
      this.body = Buffer.alloc(0);
      this.headers = {};
      this.approval = null;
      if (e.lastKind === UNKNOWN) this.reason += '; an earlier attempt may have reached the gateway, and its answer was never recorded';
      else this.reason += `; an earlier answer already said ${e.lastKind}`;
    }
    this.kind = e.lastKind;
    this.status = e.lastStatus;
    this.operationId = e.operationId;
    this.sent = e.sent;
  }
}

function nextStep(o) {
  const resume = 'Call request() again later with the same intent, method, path and body (mode resume): it is never performed twice.';
  switch (o.kind) {
    case CREATED:
    case REPLAYED:
      return "Done: the write happened exactly once. Do not send it again; to do it once more on purpose, use mode 'repeat'.";
    case IN_PROGRESS:
      return 'Still running: call status() with this intent later, or request() again with the same intent (it will not run twice).';
    case NEEDS_APPROVAL:
      if (o.approval && o.approval.lapsed(Date.now())) {
        return 'The approval request expired undecided and nothing was sent. Call request() again with the same intent and body: it opens a new approval for the same action.';
      }
      return 'A human must approve it first; nothing is sent until then. Call request() again with the same intent and body (or pass approvalWait) to run it once approved, never twice. Do not make a new intent or change the body.';
    case CONFLICT:
      return "The key was first used with a different request. If the parameters changed on purpose, use mode 'revise'.";
    case REJECTED:
      return "Refused: the request is invalid or the API declined it. Fix it and use mode 'revise'; unchanged, it fails the same way.";
    case UNAUTHORIZED:
      return "Not allowed with this token. Do not retry; fix the credentials or the principal's roles.";
    case UNKNOWN:
      if (o.expired) return 'Unknown, and the gateway no longer holds it: do not send it again; check the API by hand, and only if still needed do it under a new intent.';
      return 'Unknown: it may have taken effect. Do not retry and do not make a new intent; call status() later, or have an operator reconcile it.';
    case FAILED:
      if (!o.unfinished) return "Failed, and resuming will not change that; to try once more on purpose use mode 'repeat', or 'revise' to change the parameters.";
      if (o.sent === SENT_NO) return 'Nothing reached the gateway, so nothing happened. ' + resume;
      return 'Not applied for now. ' + resume;
    default:
      if (o.sent === SENT_MAYBE) {
        return 'A request of this intent may have left with no answer recorded. Call request() again with the same intent (mode resume): it asks the gateway first, and never performs it twice.';
      }
      return 'Not sent yet: call request() with this intent to perform it.';
  }
}
