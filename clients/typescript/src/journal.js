// The TypeScript client's journal: the durable memory of an agent's
// intents, so that a restarted process resumes each intent under the key
// it began with, refuses a changed command under a used intent before
// anything is sent, and asks the gateway before sending again what an
// earlier process may have sent.
//
// Node 20 has no SQLite, so this is a file of its own (not the Go and
// Python clients' SQLite file; the keys are the same, derived from the
// agent's secret, so the gateway recognises an intent whichever client
// sends it). The file is append-only, one JSON record per line, written
// with O_APPEND and fdatasync before the call that needs it goes on (an
// intent's record before its first request is sent). Several processes
// may share it without a lock: each write is one append, every reader
// applies the records in file order, and where two processes race (the
// same intent created at once, a repeat's number) the first record in the
// file wins for all of them. Every record starts with a newline, so that
// one torn by a crash mid-write cannot swallow the next; a line that does
// not parse is skipped. The file is created 0600.

import fs from 'node:fs';
import fsp from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { IdemgateError } from './errors.js';

export const FORMAT = 'idemgate-ts-journal';
// What the journal knows of an intent's requests (agent.Sent).
export const SENT_NO = 'no';
export const SENT_MAYBE = 'maybe';
export const SENT_YES = 'yes';
/** The kinds after which nothing an intent sent can still take effect. */
export const FINAL_KINDS = new Set(['created', 'replayed', 'conflict', 'rejected', 'unauthorized', 'failed']);

/** The journal file cannot be used (not a journal, unreadable). */
export class JournalError extends IdemgateError {}

/** A repeat while an intent of the family may still take effect. */
export class NotSettled extends Error {}

/** $IDEMGATE_TS_JOURNAL, else ~/.local/state/idemgate/journal-ts.jsonl. */
export function defaultPath() {
  if (process.env.IDEMGATE_TS_JOURNAL) return process.env.IDEMGATE_TS_JOURNAL;
  const dir = path.join(os.homedir(), '.local', 'state', 'idemgate');
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  return path.join(dir, 'journal-ts.jsonl');
}

const newId = () => randomBytes(9).toString('base64url');

/** One process's handle on a journal file. */
export class Journal {
  /** Opens (creating, 0600) the journal at file; use Journal.open. */
  constructor(file) {
    this.path = file;
    this._fh = null;
    this._offset = 0;
    this._partial = '';
    this._header = false;
    this._intents = new Map(); // "name\u0000version" -> entry
    this._byKey = new Map(); // key -> entry
    this._attemptN = new Map(); // attempt record id -> n
    this._queue = Promise.resolve(); // one read at a time in this process
  }

  /** The journal at file, opened and read. */
  static async open(file) {
    const j = new Journal(file);
    try {
      j._fh = await fsp.open(file, fs.constants.O_RDWR | fs.constants.O_CREAT | fs.constants.O_APPEND, 0o600);
      await j._checkHead();
      await j._sync();
      if (!j._header) await j._append({ t: 'journal', format: FORMAT, version: 1 });
    } catch (e) {
      await j.close();
      if (e instanceof IdemgateError) throw e;
      throw new JournalError('journal_unusable', `journal ${file}: ${e.message}`);
    }
    return j;
  }

  // A file that does not start as a journal (another program's, the Go
  // and Python clients' SQLite journal) is refused before anything is
  // written into it.
  async _checkHead() {
    const head = Buffer.alloc(64);
    const { bytesRead } = await this._fh.read(head, 0, head.length, 0);
    const text = head.subarray(0, bytesRead).toString('utf8');
    const want = `\n{"t":"journal","format":"${FORMAT}"`;
    if (bytesRead && !want.startsWith(text) && !text.startsWith(want)) {
      throw new JournalError('not_a_journal', `journal ${this.path}: not an idemgate TypeScript journal`);
    }
  }

  /** Closes the file. */
  async close() {
    const fh = this._fh;
    this._fh = null;
    if (fh) await fh.close();
  }

  // -- reading: every record in file order, from where this process left off

  _sync() {
    const run = this._queue.then(() => this._readNew());
    this._queue = run.catch(() => {});
    return run;
  }

  async _readNew() {
    if (!this._fh) throw new JournalError('journal_closed', `journal ${this.path} is closed`);
    const { size } = await this._fh.stat();
    if (size <= this._offset) return;
    const buf = Buffer.alloc(size - this._offset);
    const { bytesRead } = await this._fh.read(buf, 0, buf.length, this._offset);
    this._offset += bytesRead;
    const text = this._partial + buf.subarray(0, bytesRead).toString('utf8');
    const end = text.lastIndexOf('\n');
    this._partial = text.slice(end + 1);
    for (const line of text.slice(0, end + 1).split('\n')) {
      if (line) this._apply(line);
    }
  }

  _apply(line) {
    let r;
    try {
      r = JSON.parse(line);
    } catch {
      return; // torn by a crash mid-write
    }
    if (!this._header) {
      if (!r || r.t !== 'journal' || r.format !== FORMAT) {
        throw new JournalError('not_a_journal', `journal ${this.path}: not an idemgate TypeScript journal`);
      }
      this._header = true;
      return;
    }
    const apply = APPLY[r && r.t];
    if (apply) apply(this, r);
  }

  async _append(record) {
    if (!this._fh) throw new JournalError('journal_closed', `journal ${this.path} is closed`);
    await this._fh.write('\n' + JSON.stringify(record) + '\n');
    await this._fh.datasync();
    await this._sync();
  }

  // -- what callers read

  /** The newest version of the named intent, or null. */
  async latest(name) {
    await this._sync();
    return this._latest(name);
  }

  _latest(name) {
    let best = null;
    for (const e of this._intents.values()) if (e.intent === name && (!best || e.version > best.version)) best = e;
    return best && view(best);
  }

  /** The entry whose key is key, or null. */
  async byKey(key) {
    await this._sync();
    const e = this._byKey.get(key);
    return e ? view(e) : null;
  }

  /** The latest versions of the intents still open, oldest first. */
  async pending() {
    await this._sync();
    const latest = new Map();
    for (const e of this._intents.values()) {
      const cur = latest.get(e.intent);
      if (!cur || e.version > cur.version) latest.set(e.intent, e);
    }
    return [...latest.values()]
      .filter((e) => !FINAL_KINDS.has(e.lastKind) || (e.lastKind === 'failed' && e.lastStatus === 0))
      .sort((a, b) => (a.createdAt < b.createdAt ? -1 : a.createdAt > b.createdAt ? 1 : a.intent < b.intent ? -1 : 1))
      .map(view);
  }

  /**
   * Records a version of an intent with the key keyFor(name, version)
   * makes, before anything is sent under it; two processes creating the
   * same version at once both get the first one's record.
   */
  async create(name, version, method, p, fp, keyFor) {
    await this._sync();
    const have = this._intents.get(slot(name, version));
    if (have) return view(have);
    await this._append({ t: 'intent', name, version, key: keyFor(name, version), method, path: p, fp, at: now() });
    return view(this._intents.get(slot(name, version)));
  }

  /**
   * Records a new intent "<base>#<n>", n the first free number, with the
   * key keyFor makes for it; refused (NotSettled) while an intent of the
   * family may still take effect.
   */
  async createRepeat(base, method, p, fp, keyFor) {
    base = base.split('#')[0];
    for (;;) {
      await this._sync();
      const family = new Map();
      for (const e of this._intents.values()) {
        if (e.intent !== base && !e.intent.startsWith(base + '#')) continue;
        const cur = family.get(e.intent);
        if (!cur || e.version > cur.version) family.set(e.intent, e);
      }
      for (const e of family.values()) {
        if (e.attempts > 0 && !FINAL_KINDS.has(e.lastKind)) {
          throw new NotSettled(`intent ${e.intent} is ${e.lastKind || 'unrecorded'}`);
        }
      }
      const name = `${base}#${family.size + 1}`;
      const id = newId();
      await this._append({ t: 'intent', id, name, version: 1, key: keyFor(name, 1), method, path: p, fp, at: now() });
      const got = this._intents.get(slot(name, 1));
      if (got && got.id === id) return view(got);
      // Another process took that number first: count again.
    }
  }

  /** Records an attempt before it is sent; returns its number. */
  async beginAttempt(key) {
    const id = newId();
    await this._append({ t: 'attempt', id, key, at: now() });
    return this._attemptN.get(id) || 0;
  }

  /** When the latest attempt under key that may have reached the gateway started (ms), 0 if none. */
  async lastSentAttempt(key) {
    await this._sync();
    const e = this._byKey.get(key);
    if (!e) return 0;
    let at = 0;
    for (const a of e.attemptList) if (a.sent !== SENT_NO && a.at > at) at = a.at;
    return at;
  }

  /** Takes the gateway's word on the attempts under key that may have reached it. */
  async settle(key, sent) {
    await this._append({ t: 'settle', key, sent });
  }

  /**
   * Stores attempt n's outcome (n 0: the gateway was only asked) and
   * returns the intent as the journal now holds it, by the Go journal's
   * rule (agent.Journal.record): a known success is never replaced by a
   * lesser answer, an answer that told nothing of the operation does not
   * replace a real one, and such an answer after earlier attempts that may
   * have arrived unrecorded leaves the intent unknown.
   */
  async record(key, n, kind, status, operationId, reached, sent) {
    await this._append({ t: 'record', key, n, kind, status, op: operationId || '', reached: !!reached, sent });
    const e = this._byKey.get(key);
    return e ? view(e) : null;
  }
}

function slot(name, version) {
  return name + '\u0000' + version;
}

function now() {
  return Date.now();
}

const APPLY = {
  intent(j, r) {
    if (typeof r.name !== 'string' || typeof r.key !== 'string' || !Number.isInteger(r.version)) return;
    if (j._intents.has(slot(r.name, r.version)) || j._byKey.has(r.key)) return; // the first record wins
    const e = {
      id: r.id || '', intent: r.name, version: r.version, key: r.key, method: r.method, path: r.path,
      fingerprint: r.fp, attempts: 0, lastKind: '', lastStatus: 0, operationId: '', createdAt: r.at,
      updatedAt: r.at, attemptList: [],
    };
    j._intents.set(slot(r.name, r.version), e);
    j._byKey.set(r.key, e);
  },
  attempt(j, r) {
    const e = j._byKey.get(r.key);
    if (!e) return;
    e.attempts += 1;
    e.updatedAt = r.at;
    e.attemptList.push({ n: e.attempts, at: r.at, kind: '', status: 0, sent: SENT_MAYBE });
    j._attemptN.set(r.id, e.attempts);
  },
  settle(j, r) {
    const e = j._byKey.get(r.key);
    if (!e) return;
    for (const a of e.attemptList) if (a.sent === SENT_MAYBE) a.sent = r.sent;
  },
  record(j, r) {
    const e = j._byKey.get(r.key);
    if (!e) return;
    if (r.n > 0) {
      const a = e.attemptList.find((x) => x.n === r.n);
      if (a) Object.assign(a, { kind: r.kind, status: r.status, sent: r.sent });
    }
    const good = (k) => k === 'created' || k === 'replayed';
    const keep = (good(e.lastKind) && !good(r.kind)) || (!r.reached && e.lastKind !== '');
    const lostBefore = !r.reached && e.attemptList.some((a) => a.n !== r.n && a.sent === SENT_MAYBE);
    const kind = keep ? e.lastKind : lostBefore ? 'unknown' : r.kind;
    if (!(keep || !r.reached || r.n === 0)) e.lastStatus = r.status;
    e.lastKind = kind;
    if (r.op) e.operationId = r.op;
  },
};

function view(e) {
  let sent = SENT_NO;
  if (e.operationId || e.attemptList.some((a) => a.sent === SENT_YES)) sent = SENT_YES;
  else if (e.attemptList.some((a) => a.sent === SENT_MAYBE)) sent = SENT_MAYBE;
  return {
    intent: e.intent, version: e.version, key: e.key, method: e.method, path: e.path,
    fingerprint: e.fingerprint, attempts: e.attempts, lastKind: e.lastKind, lastStatus: e.lastStatus,
    operationId: e.operationId, sent, createdAt: e.createdAt, updatedAt: e.updatedAt,
  };
}
