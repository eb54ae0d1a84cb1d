import type { Client, Outcome } from '../index.js';

/** How an adapter runs a tool's effect: as an action, or as a keyed request through the gateway. */
export type EffectOptions<I> = {
  /** The effect runs in this process, as the idemgate action of this name. */
  action?: string;
  /** Or it is a request through the gateway, made from the input. */
  request?: (input: I) => { method?: string; path: string; body?: unknown };
  /** In request mode, the tool's result from the gateway's answer (default: its JSON). */
  result?: (outcome: Outcome, input: I) => unknown;
  /** How long to wait for an approver's decision, ms (default 0). */
  approvalWait?: number;
};
export type { Client };
