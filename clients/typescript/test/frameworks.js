// What the framework suites share: one gateway and upstream per file, a
// client per case, and the scripted models' small helpers.

import path from 'node:path';
import { Client } from '../src/index.js';
import * as h from './harness.js';

/** Starts the upstream and a gateway (SQLite) for a suite; returns them with a client maker and a closer. */
export async function suite(t) {
  const up = await h.Upstream.start();
  const gw = await h.Gateway.start(t, { upstream: up });
  const clients = [];
  return {
    up,
    gw,
    /** A client with a journal of its own (or the file given). */
    client(journal = path.join(h.tempdir(), 'journal.jsonl'), opts = {}) {
      const c = new Client({ url: gw.url, token: 'agent-token', journal, ...opts });
      clients.push(c);
      return c;
    },
    async close() {
      for (const c of clients) await c.close();
      await gw?.close();
      await up.close();
    },
  };
}

/**
 * Drops the answer to the next gateway request whose path matches re:
 * the request is sent and answered, and the client is told the
 * connection was reset (an answer lost on its way back).
 */
export function loseNextAnswer(client, re) {
  const t = client._transport;
  const orig = t.request.bind(t);
  let armed = true;
  t.request = async (method, p, ...rest) => {
    const resp = await orig(method, p, ...rest);
    if (armed && re.test(p)) {
      armed = false;
      const { TransportError } = await import('../src/transport.js');
      throw new TransportError('connection reset', true);
    }
    return resp;
  };
}
