// Type declarations of @idemgate/client (the library is plain ESM; these
// are written by hand and checked by `npm run typecheck`).

import type { Agent as HttpAgent } from 'node:http';

/** JSON as idemgate fingerprints it. */
export type JSONValue = null | boolean | number | string | JSONValue[] | { [k: string]: JSONValue | undefined };

/** The retry bounds of one call; every duration in milliseconds. */
export interface PolicyOptions {
  maxAttempts: number;
  maxElapsed: number;
  baseDelay: number;
  maxDelay: number;
  /** Sent as Prefer: wait on a retry that meets its own operation in flight. */
  wait: number;
  /** How long a request waits for a human's decision (0: needs_approval at once). */
  approvalWait: number;
  gatewayRetention: number;
}

/** Bounds the retries of one call (agent.Policy, the same defaults). */
export interface Policy extends PolicyOptions {}
export class Policy {
  constructor(o?: Partial<PolicyOptions>);
  backoff(n: number): number;
  with(changes: Partial<PolicyOptions>): Policy;
}

export interface ClientOptions {
  /** The gateway's base URL, e.g. http://127.0.0.1:8080. */
  url: string;
  /** A principal's bearer token. */
  token: string;
  /** The journal file (default $IDEMGATE_TS_JOURNAL, else ~/.local/state/idemgate/journal-ts.jsonl), or an open Journal. */
  journal?: string | Journal;
  /** Each HTTP request's timeout, ms (default 30000). */
  timeout?: number;
  /** How long action() waits for a duplicate in flight, ms (default 30000). */
  wait?: number;
  policy?: Policy | Partial<PolicyOptions>;
  /** The agent run named in Idempotency-Run (default: one made per client). */
  run?: string;
  /** The agent's secret (default: secretFile, $IDEMGATE_AGENT_SECRET_FILE, $IDEMGATE_AGENT_SECRET, ~/.config/idemgate/agent-secret). */
  secret?: string | Uint8Array;
  secretFile?: string;
  /** The agent's name among those sharing a secret (default $IDEMGATE_AGENT, else none). */
  agent?: string;
  /** An http.Agent or https.Agent of your own (TLS options, proxies). */
  httpAgent?: HttpAgent;
}

export type Mode = 'resume' | 'repeat' | 'revise';

export interface ActionOptions {
  /** The caller's stable key: 1 to 255 printable ASCII characters. */
  key?: string;
  /** Or an intent: its key is derived from the agent's secret and kept in the journal. */
  intent?: string;
  /** The command (JSON), fingerprinted with the key. */
  command?: JSONValue;
  mode?: Mode;
  /** How long to wait for a duplicate in flight, ms (default: the client's). */
  wait?: number;
  /** How long to wait for an approver's decision, ms (default 0: ApprovalRequired at once). */
  approvalWait?: number;
}

export interface ActionResult<T> {
  result: T;
  replayed: boolean;
  operationId: string;
  state: string;
  key: string;
}

/** One action under one key, as its block sees it (the block runs only for the owner). */
export class Operation {
  readonly name: string;
  readonly key: string;
  readonly command: JSONValue;
  readonly intent: string | null;
  readonly replayed: boolean;
  readonly result: unknown;
  readonly operation: Record<string, unknown>;
  readonly operationId: string;
  readonly state: string;
  readonly fence: number | null;
  readonly leaseUntil: string;
  /** A heartbeat or a step was answered lease_lost. */
  readonly lost: boolean;
  /** Aborted when the lease is lost. */
  readonly signal: AbortSignal;
  /** Recorded when set on the way out of a block that threw, if that step failed. */
  exitError?: IdemgateError;
  succeed(result?: JSONValue, options?: { resultRef?: string }): Promise<void>;
  fail(result?: JSONValue): Promise<void>;
  release(reason?: string): Promise<void>;
  markUnknown(reason?: string): Promise<void>;
}

export interface RequestOptions {
  method: string;
  path: string;
  body?: JSONValue;
  intent: string;
  mode?: Mode;
  approvalWait?: number;
}

export type OutcomeKind = 'created' | 'replayed' | 'in_progress' | 'needs_approval' | 'conflict' | 'rejected' |
  'unauthorized' | 'unknown' | 'failed';

export class ApprovalInfo {
  id: string;
  status: string;
  summary: string;
  expiresAt: string;
  url: string;
  lapsed(now: number): boolean;
}

/** What became of a request through the gateway. */
export class Outcome {
  kind: OutcomeKind;
  intent: string;
  version: number;
  key: string;
  operationId: string;
  status: number;
  body: Buffer;
  headers: Record<string, string | string[] | undefined>;
  attempts: number;
  /** Whether anything reached the gateway: "no" means nothing can have happened. */
  sent: 'no' | 'maybe' | 'yes';
  reason: string;
  unfinished: boolean;
  expired: boolean;
  approval: ApprovalInfo | null;
  readonly ok: boolean;
  readonly final: boolean;
  readonly nextStep: string;
  json(): any;
  toJSON(): Record<string, unknown>;
}

export interface JournalEntry {
  intent: string;
  version: number;
  key: string;
  method: string;
  path: string;
  fingerprint: string;
  attempts: number;
  lastKind: string;
  lastStatus: number;
  operationId: string;
  sent: 'no' | 'maybe' | 'yes';
  createdAt: number;
  updatedAt: number;
}

/** The client of one gateway, as one principal. */
export class Client {
  constructor(options: ClientOptions);
  readonly url: string;
  readonly run: string;
  readonly policy: Policy;
  /** An effect this process performs itself: fn runs only in the owner; a replay returns the recorded result. */
  action<T = unknown>(name: string, options: ActionOptions, fn: (op: Operation) => T | Promise<T>): Promise<T>;
  /** client.action, with whether it was replayed and the operation's id. */
  perform<T = unknown>(name: string, options: ActionOptions, fn: (op: Operation) => T | Promise<T>): Promise<ActionResult<T>>;
  /** A write through the gateway under an intent; throws only before sending. */
  request(options: RequestOptions): Promise<Outcome>;
  /** A function made an action (key or intent: functions of its arguments). */
  idempotent<A extends unknown[], R>(fn: (...args: A) => R | Promise<R>, options: IdempotentOptions<A>): (...args: A) => Promise<R>;
  status(intent: string): Promise<Outcome>;
  pending(): Promise<JournalEntry[]>;
  lookup(key: string): Promise<Record<string, unknown> | null>;
  close(): Promise<void>;
}

export interface IdempotentOptions<A extends unknown[]> {
  action: string;
  key?: (...args: A) => string;
  intent?: (...args: A) => string;
  /** The command fingerprinted with the key (default: the arguments, as a JSON array). */
  command?: (...args: A) => JSONValue;
  wait?: number;
}

/** client.idempotent(fn, options), the client among the options. */
export function idempotent<A extends unknown[], R>(fn: (...args: A) => R | Promise<R>, options: IdempotentOptions<A> & { client: Client }): (...args: A) => Promise<R>;
export function checkRun(run: string): void;

export interface ErrorOptions {
  status?: number | null;
  operationId?: string | null;
  state?: string | null;
  statusUrl?: string | null;
  retryAfter?: number | null;
  problem?: Record<string, unknown>;
  approval?: Record<string, unknown>;
  cause?: unknown;
}

/** The one error family: a refusal by the gateway or by the client before sending. */
export class IdemgateError extends Error {
  constructor(code: string, detail?: string, options?: ErrorOptions);
  /** The gateway's problem code, or the client's own (payload_changed, invalid_key, ...). */
  code: string;
  detail: string;
  /** The HTTP status, null when the gateway was never asked. */
  status: number | null;
  operationId: string | null;
  state: string | null;
  statusUrl: string | null;
  retryAfter: number | null;
  problem: Record<string, unknown>;
  /** Set on action_failed: the result recorded with the failure. */
  result?: unknown;
}
export class OutcomeUnknown extends IdemgateError {}
export class InProgress extends IdemgateError {}
/** fingerprint_mismatch (the gateway's 422) or payload_changed (the journal's, before sending). */
export class Conflict extends IdemgateError {}
export const FingerprintMismatch: typeof Conflict;
export class LeaseLost extends IdemgateError {}
export class ApprovalRequired extends IdemgateError {
  approval: Record<string, unknown>;
  approvalId: string;
  approvalUrl: string;
  approvalStatus: string;
  summary: string;
  expiresAt: string;
}
export class ApprovalDenied extends IdemgateError {}
export class Unavailable extends IdemgateError {}
export class InvalidJSON extends IdemgateError {}
/** Thrown in a block whose effect definitely did not happen: the operation is released. */
export class NotPerformed extends Error {
  constructor(reason?: string);
  reason: string;
}
export function errorFor(code: string, detail?: string, options?: ErrorOptions): IdemgateError;

/** The TypeScript client's journal file. */
export class Journal {
  static open(path: string): Promise<Journal>;
  readonly path: string;
  latest(intent: string): Promise<JournalEntry | null>;
  byKey(key: string): Promise<JournalEntry | null>;
  pending(): Promise<JournalEntry[]>;
  create(intent: string, version: number, method: string, path: string, fingerprint: string, keyFor: (intent: string, version: number) => string): Promise<JournalEntry>;
  beginAttempt(key: string): Promise<number>;
  record(key: string, n: number, kind: string, status: number, operationId: string, reached: boolean, sent: string): Promise<JournalEntry | null>;
  close(): Promise<void>;
}
export class JournalError extends IdemgateError {}

/** Keys derived from the agent's secret (agent.Keys). */
export class Keys {
  constructor(secret: string | Uint8Array, agent?: string);
  readonly agent: string;
  key(intent: string, version: number): string;
}
export function loadSecret(secretFile?: string): Buffer;

export function canonical(value: unknown, code?: string): string;
export function digest(value: unknown, code?: string): string;
export function fingerprint(method: string, route: string, tenant: string, command: unknown,
  params?: Record<string, string>, query?: Record<string, string[]>): string;
export const VERSION: string;
