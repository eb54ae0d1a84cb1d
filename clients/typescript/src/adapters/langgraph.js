// LangGraph (@langchain/langgraph): an effect inside a node or a task,
// keyed by the graph's own identity, so that a node re-run from its start
// when a graph resumes from its checkpoint (after an interrupt, a crash,
// a retry) makes no second effect.
//
//   const createTicket = idempotentEffect(client, { name: 'create-ticket',
//     request: (t) => ({ method: 'POST', path: '/v1/tickets', body: t }) });
//   graph.addNode('act', async (state, config) => {
//     const ticket = await createTicket(state.ticket, config);
//     ...
//   });
//
// Key rule: the thread (config.configurable.thread_id, the run), the
// checkpoint namespace (the node's path through subgraphs; with scope
// 'task', the namespace with its task ids, each superstep's run of the
// node its own action), the effect's name, and the canonical input, or
// the app's own intent (options.intent) in place of the input. The task
// id is the same when a task is resumed from its checkpoint, and a new
// one when the graph comes back to the node at a later step: with the
// default scope ('node'), the same input at the same node of a thread is
// one action (a re-plan that asks again is replayed); with scope 'task',
// each visit is its own.
//
// Approvals: an effect whose action or route needs an approval waits for
// it up to options.approvalWait; past it, with options.interrupt (pass
// LangGraph's interrupt), the graph is interrupted with the approval
// (resume it with any value once approved: the node re-runs, and its
// effect runs once; resumed before the decision, it interrupts again),
// and without, ApprovalRequired is thrown.

import { ApprovalRequired } from '../errors.js';
import { checkSpec, intentOf, runEffect } from './shared.js';

// The namespace without its task ids: "parent:<id>|child:<id>" -> "parent|child".
function nodePath(ns) {
  return String(ns || '').split('|').map((part) => part.split(':')[0]).join('|');
}

// Runs execute as the effect of input under the graph's identity in config.
function runner(client, options) {
  checkSpec('langgraph', client, options);
  const name = options.name || options.action;
  if (!name) throw new TypeError('langgraph: give options.name, the effect\'s name');
  const spec = { ...options, name };
  return async (input, config, execute) => {
    const cfg = config || (options.getConfig && options.getConfig()) || {};
    const c = cfg.configurable || {};
    const run = c.thread_id == null ? '' : String(c.thread_id);
    const scope = options.scope === 'task' ? String(c.checkpoint_ns || '') : nodePath(c.checkpoint_ns);
    let intent;
    if (options.key) intent = options.key({ run, scope, name, input, config: cfg });
    else intent = intentOf('langgraph', run, scope, name, input, options.intent ? options.intent(input, cfg) : null);
    // With options.interrupt, a pending approval interrupts the graph.
    // On resume the node runs again and interrupt() returns the resume
    // value instead: the effect is then asked for again, and interrupts
    // once more (LangGraph's next interrupt of the node) while the
    // approval is still pending.
    for (;;) {
      try {
        return await runEffect(client, spec, intent, input, () => execute(cfg));
      } catch (e) {
        if (!(e instanceof ApprovalRequired) || !options.interrupt) throw e;
        options.interrupt({
          idemgate: 'approval_required', approvalId: e.approvalId, approvalUrl: e.approvalUrl, summary: e.summary,
          operationId: e.operationId,
        });
      }
    }
  };
}

/**
 * An effect as a function (input, config) => result, keyed by the graph's
 * identity in config (a node's second argument; in a task, pass
 * LangGraph's getConfig as options.getConfig and call it with the input
 * alone).
 */
export function idempotentEffect(client, options, fn) {
  if (options && options.action && typeof fn !== 'function') throw new TypeError('langgraph: an action needs its function');
  const run = runner(client, options);
  return (input, config) => run(input, config, (cfg) => fn(input, cfg));
}

/**
 * A node whose whole body is one effect: (state, config) => update, the
 * update recorded and replayed. Its input is options.input(state) (default:
 * the state). A node that calls interrupt() must use idempotentEffect for
 * its effect instead: an interrupt inside an action would be taken for a
 * failure after the effect may have begun.
 */
export function idempotentNode(client, options, node) {
  const input = options.input || ((state) => state);
  const run = runner(client, options);
  return (state, config) => run(input(state), config, (cfg) => node(state, cfg));
}
