// Keys derived from the agent's secret (agent/keys.go, clients/python's
// keys.py, rule for rule): the workflow article's stable, deterministic
// key, so that a journal lost (a new machine, a deleted file) makes the
// same key again and the gateway replays instead of performing twice.
//
// The key of an intent's version is "ik1." and the unpadded URL-safe
// base64 of HMAC-SHA256, under the secret, of the RFC 8785 form of
// {"agent", "intent", "use": "idempotency-key", "version"}: the Go client,
// `idemgate call` and the Python client make the same one.
//
// The secret is configuration, never the journal's: a file the caller
// names (secretFile, or $IDEMGATE_AGENT_SECRET_FILE), which must exist;
// else $IDEMGATE_AGENT_SECRET; else $XDG_CONFIG_HOME/idemgate/agent-secret
// (or ~/.config/...), made with 32 random bytes, mode 0600, on first use.

import { createHmac, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { canonical } from './canonical.js';
import { IdemgateError } from './errors.js';

export const KEY_PREFIX = 'ik1.';
export const MIN_SECRET = 16;
const MAX_AGENT = 128;
const SECRET = Symbol('secret');

/** The keys of one agent under its secret; the secret is never shown. */
export class Keys {
  constructor(secret, agent = '') {
    const s = typeof secret === 'string' ? Buffer.from(secret, 'utf8') : Buffer.from(secret);
    if (s.length < MIN_SECRET) throw new IdemgateError('weak_secret', `agent secret: want at least ${MIN_SECRET} bytes`);
    if (Buffer.byteLength(agent, 'utf8') > MAX_AGENT || /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u.test(agent)) {
      throw new IdemgateError('invalid_agent', `agent name ${JSON.stringify(agent)}: want up to ${MAX_AGENT} printable characters`);
    }
    Object.defineProperty(this, SECRET, { value: s, enumerable: false });
    this.agent = agent;
  }

  /** The key of the intent's version (agent.Keys.Key). */
  key(intent, version) {
    const doc = { agent: this.agent, intent, use: 'idempotency-key', version };
    return KEY_PREFIX + createHmac('sha256', this[SECRET]).update(canonical(doc), 'utf8').digest('base64url');
  }

  toString() {
    return `Keys(agent=${JSON.stringify(this.agent)}, secret hidden)`;
  }

  toJSON() {
    return { agent: this.agent };
  }

  [Symbol.for('nodejs.util.inspect.custom')]() {
    return this.toString();
  }
}

/** $XDG_CONFIG_HOME/idemgate/agent-secret, else ~/.config/idemgate/agent-secret. */
export function defaultSecretFile() {
  let config = process.env.XDG_CONFIG_HOME || '';
  if (!path.isAbsolute(config)) config = path.join(os.homedir(), '.config');
  return path.join(config, 'idemgate', 'agent-secret');
}

/** The agent's secret, found as the module's comment says. */
export function loadSecret(secretFile) {
  const file = secretFile || process.env.IDEMGATE_AGENT_SECRET_FILE || '';
  if (file) return readSecret(file);
  const env = process.env.IDEMGATE_AGENT_SECRET || '';
  if (env) return Buffer.from(env, 'utf8');
  return ensureSecret(defaultSecretFile());
}

function readSecret(file) {
  try {
    return Buffer.from(fs.readFileSync(file, 'utf8').trim(), 'utf8');
  } catch (e) {
    throw new IdemgateError('no_secret', `agent secret: ${e.message}`);
  }
}

// The secret at file, made there first if there is none; two processes
// making it at once keep the first one linked into place.
function ensureSecret(file) {
  if (fs.existsSync(file)) return readSecret(file);
  const dir = path.dirname(file);
  try {
    fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
    const tmp = path.join(dir, `.agent-secret-${process.pid}-${randomBytes(6).toString('hex')}`);
    const fd = fs.openSync(tmp, 'wx', 0o600);
    try {
      fs.writeSync(fd, randomBytes(32).toString('base64url') + '\n');
      fs.fsyncSync(fd);
    } finally {
      fs.closeSync(fd);
    }
    try {
      fs.linkSync(tmp, file);
    } catch (e) {
      if (e.code !== 'EEXIST') throw e;
    } finally {
      fs.rmSync(tmp, { force: true });
    }
  } catch (e) {
    if (e instanceof IdemgateError) throw e;
    throw new IdemgateError('no_secret', `agent secret: ${e.message}`);
  }
  return readSecret(file);
}

/** A client's keys: its secret if given, else loadSecret; its agent if given, else $IDEMGATE_AGENT. */
export function keysFor(secret, secretFile, agent) {
  const raw = secret == null ? loadSecret(secretFile) : secret;
  return new Keys(raw, agent == null ? process.env.IDEMGATE_AGENT || '' : agent);
}
