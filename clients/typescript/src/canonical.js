// RFC 8785 canonical JSON and fingerprints, as the Go side and the Python
// client make them: members sorted by UTF-16 code units, numbers as
// ECMAScript prints them, minimal string escaping, no spaces. A value that
// is not JSON, or that JSON would silently change (NaN, a lone surrogate,
// a Map that JSON.stringify writes as {}), is refused rather than
// fingerprinted as something else.

import { createHash } from 'node:crypto';
import { InvalidJSON } from './errors.js';

/** The Go side's nesting bound (fingerprint.DefaultMaxDepth). */
export const MAX_DEPTH = 64;
/** The prefix of every fingerprint. */
export const PREFIX = 'sha256:';

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/**
 * The canonical JSON text of value. Objects' members whose value is
 * undefined are left out, as JSON.stringify does; a value with toJSON
 * (a Date) is written as toJSON returns it; anything else that is not
 * JSON throws InvalidJSON with `code` and the JSON Pointer of the value.
 */
export function canonical(value, code = 'invalid_command') {
  const out = [];
  write(value === undefined ? null : value, out, [], code);
  return out.join('');
}

/** sha256: and the hex SHA-256 of the canonical form of value. */
export function digest(value, code = 'invalid_command') {
  return PREFIX + createHash('sha256').update(canonical(value, code), 'utf8').digest('hex');
}

/**
 * fingerprint.Of: the sha256 of the canonical
 * {"method","route","params","query","tenant","command"}.
 */
export function fingerprint(method, route, tenant, command, params = {}, query = {}) {
  const q = {};
  for (const [k, v] of Object.entries(query)) if (v && v.length) q[k] = [...v];
  return digest({ method: method.toUpperCase(), route, params: { ...params }, query: q, tenant, command });
}

function pointer(path) {
  return path.map((p) => '/' + String(p).replace(/~/g, '~0').replace(/\//g, '~1')).join('') || '/';
}

function fail(path, detail, code) {
  return new InvalidJSON(code, `${detail} (path ${pointer(path)})`);
}

function write(v, out, path, code) {
  if (v !== null && typeof v === 'object' && typeof v.toJSON === 'function') v = v.toJSON();
  switch (typeof v) {
    case 'string':
      if (LONE_SURROGATE.test(v)) throw fail(path, 'invalid UTF-8: a lone surrogate in a string', code);
      out.push(JSON.stringify(v));
      return;
    case 'number':
      if (!Number.isFinite(v)) throw fail(path, `number out of range: ${v}`, code);
      out.push(JSON.stringify(v)); // ECMAScript's Number#toString, RFC 8785's number form; -0 is "0"
      return;
    case 'boolean':
      out.push(v ? 'true' : 'false');
      return;
    case 'bigint':
      out.push(bigint(v, path, code));
      return;
    case 'object':
      if (v === null) {
        out.push('null');
        return;
      }
      if (path.length >= MAX_DEPTH) throw fail(path, `nesting too deep: limit ${MAX_DEPTH}`, code);
      if (Array.isArray(v)) return array(v, out, path, code);
      return object(v, out, path, code);
    default:
      throw fail(path, `not JSON: ${v === undefined ? 'undefined' : 'a ' + typeof v}`, code);
  }
}

function array(v, out, path, code) {
  out.push('[');
  for (let i = 0; i < v.length; i++) {
    if (i) out.push(',');
    if (v[i] === undefined) throw fail([...path, i], 'not JSON: undefined', code);
    write(v[i], out, [...path, i], code);
  }
  out.push(']');
}

function object(v, out, path, code) {
  const proto = Object.getPrototypeOf(v);
  if (proto !== Object.prototype && proto !== null) {
    const name = (v.constructor && v.constructor.name) || 'object';
    throw fail(path, `not JSON: a ${name} (give a plain object)`, code);
  }
  const keys = Object.keys(v).filter((k) => v[k] !== undefined).sort(); // UTF-16 code units
  out.push('{');
  keys.forEach((k, i) => {
    if (i) out.push(',');
    if (LONE_SURROGATE.test(k)) throw fail(path, 'invalid UTF-8: a lone surrogate in a member name', code);
    out.push(JSON.stringify(k), ':');
    write(v[k], out, [...path, k], code);
  });
  out.push('}');
}

// A BigInt is written as its nearest double prints, if that text denotes
// it exactly; otherwise two amounts would share a fingerprint (2n**60n
// prints as 1152921504606847000) and it is refused, as the gateway does.
function bigint(n, path, code) {
  const f = Number(n);
  if (!Number.isFinite(f)) throw fail(path, `number out of range: ${n}`, code);
  const text = JSON.stringify(f);
  if (!exact(text, n)) throw fail(path, `number cannot be represented exactly: ${n} would become ${text}`, code);
  return text;
}

function exact(text, n) {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:e([+-]\d+))?$/.exec(text);
  if (!m) return false;
  const [, sign, whole, frac = '', exp = '0'] = m;
  const e = Number(exp) - frac.length;
  if (e < 0) return false;
  const value = BigInt(sign + whole + frac) * 10n ** BigInt(e);
  return value === n;
}
