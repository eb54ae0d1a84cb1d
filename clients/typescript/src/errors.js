// The one error family of the client. Every refusal the gateway answers is
// an RFC 9457 problem with a `code` (docs/design.md, "The HTTP contract");
// the client throws it as an IdemgateError with the same code, so that a
// caller branches on one field, or on the subclass where the answer calls
// for a different next step. Refusals the client makes itself, before
// anything is sent (a changed command under a used intent, a value that is
// not JSON), are the same family with codes of their own.

/** A refusal, by the gateway or by the client before sending. */
export class IdemgateError extends Error {
  constructor(code, detail = '', opts = {}) {
    super(message(code, detail, opts));
    this.name = new.target.name;
    this.code = code;
    this.detail = detail;
    this.status = opts.status ?? null;
    this.operationId = opts.operationId ?? null;
    this.state = opts.state ?? null;
    this.statusUrl = opts.statusUrl ?? null;
    this.retryAfter = opts.retryAfter ?? null;
    this.problem = opts.problem ?? {};
    if (opts.cause !== undefined) this.cause = opts.cause;
  }
}

function message(code, detail, opts) {
  let text = code;
  if (opts.status) text += ` (${opts.status})`;
  if (detail) text += `: ${detail}`;
  if (opts.operationId) text += ` [operation ${opts.operationId}]`;
  return text;
}

/** The effect may have happened and nobody knows: never retried blind. */
export class OutcomeUnknown extends IdemgateError {}

/** Another owner still holds the operation after the client's wait. */
export class InProgress extends IdemgateError {}

/**
 * The key or intent was used before with another command: 422
 * fingerprint_mismatch from the gateway, or payload_changed from the
 * journal before anything was sent. Nothing ran.
 */
export class Conflict extends IdemgateError {}

/** The Python client's name for the gateway's 422. */
export const FingerprintMismatch = Conflict;

/**
 * The lease no longer holds: another owner has it, or it lapsed. The step
 * that got it changed nothing; a lapsed lease makes the operation unknown.
 */
export class LeaseLost extends IdemgateError {}

/**
 * The operation waits for a human decision (202); nothing ran. The same
 * call with the same key or intent runs it once approved, never twice.
 */
export class ApprovalRequired extends IdemgateError {
  constructor(code, detail = '', opts = {}) {
    super(code, detail, opts);
    const a = opts.approval || {};
    this.approval = a;
    this.approvalId = a.id || '';
    this.approvalUrl = a.url || '';
    this.approvalStatus = a.status || '';
    this.summary = a.summary || '';
    this.expiresAt = a.expires_at || '';
    if (this.summary) this.message += ` (approve ${JSON.stringify(this.summary)}: approval ${this.approvalId})`;
    else if (this.approvalId) this.message += ` (approval ${this.approvalId})`;
  }
}

/** A human denied the operation (403): it is failed for good. */
export class ApprovalDenied extends IdemgateError {}

/**
 * Not now, and nothing applied: the gateway unreachable before sending,
 * its store unavailable, a rate limit, a concurrency group held, past the
 * client's retry budget. The same call with the same key is safe later.
 */
export class Unavailable extends IdemgateError {}

/** A command or result that is not JSON as idemgate fingerprints it. */
export class InvalidJSON extends IdemgateError {}

/**
 * Thrown inside an action's block when the effect was definitely not
 * performed: the operation is released, and the next call with the same
 * key runs it again. It is thrown on to the caller after the release, so
 * that code after the action never takes "not done" for "done". The reason
 * is recorded at the gateway: keep secrets out of it.
 */
export class NotPerformed extends Error {
  constructor(reason = 'not performed') {
    super(reason);
    this.name = 'NotPerformed';
    this.reason = reason;
  }
}

const BY_CODE = {
  outcome_unknown: OutcomeUnknown,
  in_progress: InProgress,
  fingerprint_mismatch: Conflict,
  payload_changed: Conflict,
  lease_lost: LeaseLost,
  approval_required: ApprovalRequired,
  approval_expired: ApprovalRequired,
  approval_denied: ApprovalDenied,
  store_unavailable: Unavailable,
  rate_limited: Unavailable,
  concurrency_locked: Unavailable,
  upstream_unavailable: Unavailable,
  gateway_unreachable: Unavailable,
};

/** The error of the family for a problem code. */
export function errorFor(code, detail = '', opts = {}) {
  const Cls = BY_CODE[code] || IdemgateError;
  return new Cls(code, detail, opts);
}
