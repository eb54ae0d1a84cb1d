import type { Client } from '../index.js';
import type { EffectOptions } from './shared.js';

export interface LangGraphEffectOptions<I = any> extends EffectOptions<I> {
  /** The effect's name (default: the action's). */
  name?: string;
  /** 'node' (default): the node's path through subgraphs; 'task': with its task ids, each visit its own action. */
  scope?: 'node' | 'task';
  intent?: (input: I, config: any) => string;
  key?: (parts: { run: string; scope: string; name: string; input: I; config: any }) => string;
  /** LangGraph's interrupt: a pending approval interrupts the graph. */
  interrupt?: (value: any) => any;
  /** LangGraph's getConfig, for an effect called without its config (in a task). */
  getConfig?: () => any;
}

/** An effect keyed by the graph's identity: (input, config) => result. */
export function idempotentEffect<I, R>(client: Client, options: LangGraphEffectOptions<I>, fn?: (input: I, config: any) => R | Promise<R>): (input: I, config?: any) => Promise<R>;

/** A node whose whole body is one effect (no interrupt() inside). */
export function idempotentNode<S, U>(client: Client, options: LangGraphEffectOptions<any> & { input?: (state: S) => unknown }, node: (state: S, config: any) => U | Promise<U>): (state: S, config: any) => Promise<U>;
