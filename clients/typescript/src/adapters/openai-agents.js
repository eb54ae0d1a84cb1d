// The OpenAI Agents SDK (@openai/agents): a function tool whose execute
// runs as an idemgate action, or as a keyed request through the gateway.
// It wraps the options of the SDK's tool(), before tool() builds it, so
// that an execute that throws reaches idemgate (tool()'s own error
// function would turn it into a result first):
//
//   const createTicket = tool(idempotentTool(client, {
//     name: 'create_ticket', description, parameters, execute }, {
//     action: 'ticket.create', run: (ctx) => ctx.context.conversationId }));
//
// Key rule: the app's run (options.run: a string, or a function of the
// RunContext; its context travels in a saved RunState, so a run resumed
// in another process keeps its keys), no step (turns and call ids change
// on every re-plan), the tool's name and the canonical input, or the
// app's own intent (options.intent).
//
// Approvals: a tool with needsApproval asks idemgate instead of the app:
// the SDK's needsApproval becomes "idemgate holds this call for a human"
// (the call is sent with nothing run: an action's reservation, released
// at once, or the request, which the gateway holds unforwarded), so the
// run stops with an interruption while the approval is pending in
// idemgate's inbox. The SDK evaluates needsApproval again when a saved
// RunState is resumed: once idemgate's approver has approved, it is
// false and the tool runs once; approving only in the SDK does not
// bypass idemgate (the execute meets the pending approval and throws
// ApprovalRequired).

import { awaitsApproval, checkSpec, intentOf, runEffect } from './shared.js';

/** The options of tool(), with execute (and needsApproval) running through idemgate. */
export function idempotentTool(client, toolOptions, options = {}) {
  checkSpec('openai-agents', client, options);
  if (toolOptions && toolOptions.type === 'function' && typeof toolOptions.invoke === 'function') {
    throw new TypeError('openai-agents: give idempotentTool the options of tool(), and tool() its result: tool(idempotentTool(client, { name, ... }, options))');
  }
  const name = toolOptions.name || options.name;
  if (!name) throw new TypeError('openai-agents: the tool needs a name');
  const original = toolOptions.execute;
  if (options.action && typeof original !== 'function') throw new TypeError(`openai-agents tool ${name}: an action needs the tool's execute`);
  const intentFor = (input, runContext) => {
    const run = typeof options.run === 'function' ? options.run(runContext, input) : options.run;
    if (options.key) return options.key({ run, tool: name, input, runContext });
    return intentOf('openai-agents', run, '', name, input, options.intent ? options.intent(input, runContext) : null);
  };
  const spec = { ...options, name };
  const declared = toolOptions.needsApproval;
  const gated = async (runContext, input, callId) =>
    !!options.action && (typeof declared === 'function' ? !!(await declared(runContext, input, callId)) : !!declared);
  const wrapped = {
    ...toolOptions,
    name,
    execute: async (input, runContext, details) => runEffect(client, spec, intentFor(input, runContext), input,
      () => original(input, runContext, details),
      { gated: await gated(runContext, input, details && details.toolCall && details.toolCall.callId) }),
  };
  if (declared) {
    wrapped.needsApproval = async (runContext, input, callId) => {
      if (typeof declared === 'function' && !(await declared(runContext, input, callId))) return false;
      return awaitsApproval(client, spec, intentFor(input, runContext), input);
    };
  }
  return wrapped;
}
