// The Vercel AI SDK (ai 6 and 7): a tool whose execute runs as an
// idemgate action, or as a keyed request through the gateway.
//
//   tools: { createTicket: idempotentTool(client, tool({ ... }), {
//     name: 'createTicket', action: 'ticket.create', run: chatId }) }
//
// Key rule: the app's run (options.run: a string, or a function of the
// input and the tool's execution options, e.g. the chat's id and the
// user's message id), no step (the SDK's step numbers and tool call ids
// change on every re-plan), the tool's name and the canonical input, or
// the app's own intent (options.intent) in place of the input.
//
// Approvals: the tool's needsApproval is taken off the tool, so that the
// SDK does not ask in the app with an approval bound only to its own
// HMAC of the input; the human decides in idemgate, on the exact
// fingerprint (the action's or route's approval: policy). The execute
// waits for the decision up to options.approvalWait, and otherwise throws
// ApprovalRequired (the model reads its next step; the same call later
// runs it once approved, never twice). Where needsApproval holds for an
// input and the action asks for no approval, the call is refused and
// nothing runs.

import { checkSpec, intentOf, runEffect } from './shared.js';

/** A copy of tool whose execute runs its effect once per intent. */
export function idempotentTool(client, tool, options = {}) {
  checkSpec('ai', client, options);
  const name = options.name;
  if (!name) throw new TypeError('ai: give options.name, the tool\'s name in the tools object');
  const original = tool.execute;
  if (options.action && typeof original !== 'function') throw new TypeError(`ai tool ${name}: an action needs the tool's execute`);
  const needsApproval = tool.needsApproval;
  const wrapped = { ...tool };
  delete wrapped.needsApproval;
  wrapped.execute = async (input, execOptions = {}) => {
    const run = typeof options.run === 'function' ? options.run(input, execOptions) : options.run;
    const own = options.intent ? options.intent(input, execOptions) : null;
    const intent = options.key ? options.key({ run, tool: name, input, options: execOptions }) : intentOf('ai', run, '', name, input, own);
    const gated = typeof needsApproval === 'function' ? !!(await needsApproval(input, execOptions)) : !!needsApproval;
    return runEffect(client, { ...options, name }, intent, input, () => original(input, execOptions), { gated: gated && !!options.action });
  };
  return wrapped;
}
