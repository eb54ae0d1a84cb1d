// @idemgate/client: writes and effects safe to retry, for agents written
// in TypeScript and JavaScript. See README.md and docs/design.md, "The
// TypeScript client".

export { Client, idempotent, checkRun } from './client.js';
export { Operation } from './action.js';
export {
  IdemgateError, OutcomeUnknown, InProgress, Conflict, FingerprintMismatch, LeaseLost, ApprovalRequired,
  ApprovalDenied, Unavailable, InvalidJSON, NotPerformed, errorFor,
} from './errors.js';
export { Outcome, ApprovalInfo } from './outcome.js';
export { Journal, JournalError } from './journal.js';
export { Keys, loadSecret } from './keys.js';
export { canonical, digest, fingerprint } from './canonical.js';
export { Policy } from './util.js';
export const VERSION = '0.1.0';
