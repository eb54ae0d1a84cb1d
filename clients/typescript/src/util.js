// Small helpers shared by the client's modules.

import { randomBytes } from 'node:crypto';

/** Resolves after ms milliseconds (0 or less: at once). */
export function sleep(ms) {
  return ms > 0 ? new Promise((r) => setTimeout(r, ms)) : Promise.resolve();
}

const CROCKFORD = '0123456789ABCDEFGHJKMNPQRSTVWXYZ';

/** A ULID: 48 bits of milliseconds and 80 random bits, Crockford base32. */
export function ulid() {
  let n = (BigInt(Date.now()) << 80n) | BigInt('0x' + randomBytes(10).toString('hex'));
  let s = '';
  for (let i = 0; i < 26; i++) {
    s = CROCKFORD[Number(n & 31n)] + s;
    n >>= 5n;
  }
  return s;
}

/** An RFC 3339 time as milliseconds since the epoch; 0 when absent or unreadable. */
export function parseTime(text) {
  if (!text) return 0;
  const t = Date.parse(String(text).replace(/(\.\d{3})\d+/, '$1'));
  return Number.isNaN(t) ? 0 : t;
}

/** A time in milliseconds as RFC 3339 UTC, to the second. */
export function formatUTC(ms) {
  return new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');
}

/**
 * Bounds the retries of one call (agent.Policy, the same defaults; every
 * duration in milliseconds).
 */
export class Policy {
  constructor(o = {}) {
    this.maxAttempts = o.maxAttempts ?? 5;
    this.maxElapsed = o.maxElapsed ?? 120_000;
    this.baseDelay = o.baseDelay ?? 200;
    this.maxDelay = o.maxDelay ?? 10_000;
    /** Sent as Prefer: wait on a retry that meets its own operation in flight. */
    this.wait = o.wait ?? 10_000;
    /** How long a call waits for a human's decision (0: it answers needs_approval at once). */
    this.approvalWait = o.approvalWait ?? 0;
    /** How long the gateway keeps an operation after its last change. */
    this.gatewayRetention = o.gatewayRetention ?? 24 * 3600_000;
  }

  /** Exponential with full jitter: uniform in [0, min(max, base*2^(n-1))). */
  backoff(n) {
    const ceiling = Math.min(this.baseDelay * 2 ** Math.min(n - 1, 30), this.maxDelay);
    return Math.random() * ceiling;
  }

  with(changes) {
    return new Policy({ ...this, ...changes });
  }
}
