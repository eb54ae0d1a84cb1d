import type { Client } from '../index.js';
import type { EffectOptions } from './shared.js';

export interface AiToolOptions<I = any> extends EffectOptions<I> {
  /** The tool's name in the tools object. */
  name: string;
  /** The app's run (a chat id, a conversation and message id), or a function of the input and the execution options. */
  run: string | ((input: I, options: any) => string);
  /** The app's own intent, in place of the canonical input. */
  intent?: (input: I, options: any) => string;
  /** The whole intent, in place of the rule. */
  key?: (parts: { run: string; tool: string; input: I; options: any }) => string;
}

/** A copy of an AI SDK tool (tool()'s result or its options) whose execute runs once per intent. */
export function idempotentTool<T extends { execute?: (...args: any[]) => any }>(client: Client, tool: T, options: AiToolOptions<any>): T;
