// HTTP to one gateway over keep-alive connections (node:http, node:https).
//
// Every call says whether its request may have reached the gateway
// (`sent`): "connection refused" means nothing happened, a timeout or a
// reset after writing means anything may have, and the callers treat the
// two apart: the first is retried, the second is asked about first.

import http from 'node:http';
import https from 'node:https';

/** The largest answer read; a longer one is an error. */
export const MAX_BODY = 4 << 20;

// Errors raised before any byte of the request can have left.
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH', 'ENETUNREACH', 'EADDRNOTAVAIL']);

/** One answer: status, headers (names lower-case) and body bytes. */
export class Response {
  constructor(status, headers, body) {
    this.status = status;
    this.headers = headers;
    this.body = body;
  }

  header(name, dflt = '') {
    const v = this.headers[name.toLowerCase()];
    return v === undefined ? dflt : Array.isArray(v) ? v.join(', ') : String(v);
  }

  /** The body as JSON, or null if it is empty or not JSON. */
  json() {
    if (this._json !== undefined) return this._json;
    try {
      this._json = this.body.length ? JSON.parse(this.body.toString('utf8')) : null;
    } catch {
      this._json = null;
    }
    return this._json;
  }

  /** The RFC 9457 problem this answer is, or null. */
  problem() {
    const media = this.header('content-type').split(';')[0].trim().toLowerCase();
    if (media !== 'application/problem+json') return null;
    const p = this.json();
    return p && typeof p === 'object' && !Array.isArray(p) ? p : null;
  }

  /** The problem's code, or '' if the answer is not a problem. */
  code() {
    const p = this.problem();
    return p && p.code ? String(p.code) : '';
  }

  /** Retry-After in seconds, 0 if absent. */
  retryAfter() {
    const v = this.header('retry-after');
    if (!v) return 0;
    if (/^\d+$/.test(v)) return Number(v);
    const t = Date.parse(v);
    return Number.isNaN(t) ? 0 : Math.max(0, (t - Date.now()) / 1000);
  }
}

/** No answer. `sent` is false only when the request certainly did not leave. */
export class TransportError extends Error {
  constructor(cause, sent) {
    super(cause);
    this.name = 'TransportError';
    this.reason = cause;
    this.sent = sent;
  }
}

/** Sends requests to one base URL over keep-alive connections. */
export class Transport {
  constructor(baseUrl, { timeout = 30_000, agent } = {}) {
    let u;
    try {
      u = new URL(baseUrl);
    } catch {
      throw new TypeError(`gateway URL ${JSON.stringify(baseUrl)}: want http:// or https:// and a host`);
    }
    if ((u.protocol !== 'http:' && u.protocol !== 'https:') || !u.hostname) {
      throw new TypeError(`gateway URL ${JSON.stringify(baseUrl)}: want http:// or https:// and a host`);
    }
    this.baseUrl = baseUrl.replace(/\/+$/, '');
    this._mod = u.protocol === 'https:' ? https : http;
    this._host = u.hostname.replace(/^\[|\]$/g, '');
    this._port = u.port || (u.protocol === 'https:' ? 443 : 80);
    this._prefix = u.pathname.replace(/\/+$/, '');
    this.timeout = timeout; // ms
    this._agent = agent || new this._mod.Agent({ keepAlive: true, maxSockets: 64, scheduling: 'lifo' });
    this._ownAgent = !agent;
  }

  /** Sends one request; rejects with TransportError when no answer came. */
  request(method, path, body, headers = {}, timeout) {
    const ms = timeout ?? this.timeout;
    return new Promise((resolve, reject) => {
      const h = { ...headers };
      if (body != null) h['Content-Length'] = Buffer.byteLength(body);
      const req = this._mod.request({
        host: this._host, port: this._port, method, path: this._prefix + path, headers: h, agent: this._agent,
      });
      let done = false;
      const fail = (cause, sent) => {
        if (done) return;
        done = true;
        clearTimeout(timer);
        req.destroy();
        reject(new TransportError(cause, sent));
      };
      const timer = ms > 0 ? setTimeout(() => fail('timed out', true), ms) : null;
      req.on('error', (e) => fail(describe(e), !NOT_SENT.has(e.code)));
      req.on('socket', (s) => s.setNoDelay(true));
      req.on('response', (res) => {
        const chunks = [];
        let size = 0;
        res.on('data', (c) => {
          size += c.length;
          if (size > MAX_BODY) fail('the answer is larger than 4 MiB', true);
          else chunks.push(c);
        });
        res.on('error', (e) => fail(describe(e), true));
        res.on('end', () => {
          if (done) return;
          done = true;
          clearTimeout(timer);
          resolve(new Response(res.statusCode, res.headers, Buffer.concat(chunks)));
        });
        res.on('aborted', () => fail('the connection closed mid-answer', true));
      });
      req.end(body == null ? undefined : body);
    });
  }

  /** Closes the idle connections (a later request opens new ones). */
  close() {
    if (this._ownAgent) this._agent.destroy();
  }
}

function describe(e) {
  switch (e.code) {
    case 'ECONNREFUSED': return 'connection refused';
    case 'ECONNRESET': return 'connection reset';
    case 'ENOTFOUND': case 'EAI_AGAIN': return "cannot resolve the gateway's host";
    case 'EPIPE': return 'the connection closed mid-request';
    default: return e.message || String(e);
  }
}
