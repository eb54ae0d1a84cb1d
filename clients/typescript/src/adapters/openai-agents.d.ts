import type { Client } from '../index.js';
import type { EffectOptions } from './shared.js';

export interface AgentsToolOptions<I = any> extends EffectOptions<I> {
  /** The app's run, or a function of the RunContext (its context travels in a saved RunState). */
  run: string | ((runContext: any, input: I) => string);
  /** The tool's name, if the tool options have none. */
  name?: string;
  intent?: (input: I, runContext: any) => string;
  key?: (parts: { run: string; tool: string; input: I; runContext: any }) => string;
}

/** The options of the Agents SDK's tool(), with execute (and needsApproval) through idemgate: tool(idempotentTool(client, {...}, options)). */
export function idempotentTool<T extends { name?: string; execute?: (...args: any[]) => any; needsApproval?: unknown }>(client: Client, toolOptions: T, options: AgentsToolOptions<any>): T;
