// What the three examples share: the client, where the gateway and the
// reference ops API are, and the ops API's own count of its effects.
//
// Start the two servers from the repository's root first (README.md):
//   idemgate opsapi --naive
//   OPS_API_TOKEN=x STRIPE_WEBHOOK_SECRET=whsec_x idemgate serve --config examples/gateway.yaml

import os from 'node:os';
import path from 'node:path';
import fs from 'node:fs';
import { Client } from '@idemgate/client';

export const GATEWAY = process.env.IDEMGATE_URL || 'http://127.0.0.1:8080';
export const OPS = process.env.OPS_URL || 'http://127.0.0.1:9090';
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'idemgate-example-'));

/** A client of the example gateway, as the demo agent, with a journal of this run's. */
export function client() {
  return new Client({
    url: GATEWAY, token: process.env.IDEMGATE_TOKEN || 'agent-demo-token',
    journal: process.env.IDEMGATE_TS_JOURNAL || path.join(dir, 'journal.jsonl'),
  });
}

/** Tickets the ops API created: its own count, not HTTP answers. */
export async function ticketsCreated() {
  const r = await fetch(`${OPS}/v1/effects`);
  return (await r.json()).tickets_created;
}

/** A run id of this process's: a new conversation each time the example runs. */
export const RUN = `example-${process.pid}-${Date.now()}`;
