// What the three framework adapters share: the key rule (an intent named
// from the runtime's identity, never from the model), and running a
// tool's effect as an idemgate action or a keyed request through the
// gateway.
//
// The intent of a tool call is the canonical JSON of
//   {"framework", "run", "scope", "tool", "input"} or, when the app names
//   its own intent, {"framework", "run", "scope", "tool", "intent"}
// where run is the app's run, thread or conversation id, scope the
// framework's stable step or task identity where one exists ("" where
// none does), tool the tool's name and input the sha256 of the canonical
// input. Its key is derived from it under the agent's secret, as every
// intent's is. The model's own tool call id is never part of it: the
// model mints a new one on every re-plan.

import { canonical, digest } from '../canonical.js';
import {
  ApprovalDenied, ApprovalRequired, Conflict, IdemgateError, InProgress, NotPerformed, OutcomeUnknown, Unavailable,
} from '../errors.js';

/** The intent a tool call runs under (see above); `own` is the app's intent, if it names one. */
export function intentOf(framework, run, scope, tool, input, own) {
  if (typeof run !== 'string' || !run) {
    throw new IdemgateError('no_run', `${framework} tool ${tool}: no run id; give options.run (the app's run, thread or conversation id): keys come from the runtime, never from the model`);
  }
  const doc = { framework, run, scope: scope || '', tool };
  if (own != null && own !== '') doc.intent = String(own);
  else doc.input = digest(input === undefined ? null : input, 'invalid_command');
  return canonical(doc);
}

/** Checks an adapter's options: a client, and an action or a request (not both). */
export function checkSpec(framework, client, spec) {
  if (!client || typeof client.perform !== 'function') throw new TypeError(`${framework}: give an idemgate Client`);
  if (!spec || !spec.action === !spec.request) {
    throw new TypeError(`${framework}: give options.action (the effect runs in this process as an idemgate action) or options.request (input => ({ method, path, body }), sent through the gateway), not both`);
  }
  if (spec.request && typeof spec.request !== 'function') throw new TypeError(`${framework}: options.request is a function of the input`);
}

/**
 * Runs one tool call's effect under its intent: as an action whose block
 * is `execute()` (a replay returns the recorded result without running
 * it), or as a request through the gateway whose answer's JSON (or
 * spec.result(outcome, input)) is the result. Whatever is not a result (a
 * conflict, an unknown outcome, an approval still waited for) throws an
 * IdemgateError whose message says what happened and what to do next:
 * the framework shows it to the model as the tool's error.
 */
export async function runEffect(client, spec, intent, input, execute, { gated = false } = {}) {
  const approvalWait = spec.approvalWait ?? 0;
  if (spec.action) {
    const r = await client.perform(spec.action, { intent, command: input ?? null, approvalWait }, async (op) => {
      if (gated && !op.operation.approval) {
        throw new NotPerformed('the tool needs approval and the action has none: nothing was run');
      }
      return execute(op);
    }).catch((e) => {
      if (e instanceof NotPerformed && gated) {
        throw new IdemgateError('approval_not_configured', `tool ${spec.name || spec.action} needs approval, but the gateway's action ${spec.action} asks for none: add an approval: policy to the action (nothing was run)`);
      }
      throw e;
    });
    return r.result;
  }
  const req = spec.request(input);
  const out = await client.request({ method: req.method || 'POST', path: req.path, body: req.body, intent, approvalWait });
  if (out.ok) return spec.result ? spec.result(out, input) : out.json();
  throw outcomeError(out);
}

/** The error for an outcome that is not a result: its reason and its next step, for the model to read. */
export function outcomeError(out) {
  const detail = `${out.reason}. ${out.nextStep}`;
  const opts = { status: out.status || null, operationId: out.operationId || null };
  switch (out.kind) {
    case 'needs_approval':
      return new ApprovalRequired('approval_required', detail, {
        ...opts, approval: out.approval ? { id: out.approval.id, url: out.approval.url, status: out.approval.status, summary: out.approval.summary, expires_at: out.approval.expiresAt } : {},
      });
    case 'conflict': return new Conflict('fingerprint_mismatch', detail, opts);
    case 'unknown': return new OutcomeUnknown('outcome_unknown', detail, opts);
    case 'in_progress': return new InProgress('in_progress', detail, opts);
    case 'failed':
      if (/approval_denied/.test(out.reason)) return new ApprovalDenied('approval_denied', detail, opts);
      return out.unfinished ? new Unavailable('unavailable', detail, opts) : new IdemgateError('failed', detail, opts);
    default: return new IdemgateError(out.kind || 'failed', detail, opts);
  }
}

/**
 * Asks idemgate whether a tool call must wait for a human, without
 * running its effect: true while its approval is pending. For an action,
 * a reserve (a 201 is released at once: nothing was run); for a request,
 * the request itself, which the gateway holds unforwarded while it waits
 * for an approval and otherwise performs once (the execute that follows
 * gets it replayed).
 */
export async function awaitsApproval(client, spec, intent, input) {
  try {
    if (spec.action) {
      await client.perform(spec.action, { intent, command: input ?? null }, async () => {
        throw new NotPerformed('an approval check: not run yet');
      });
      return false;
    }
    const req = spec.request(input);
    const out = await client.request({ method: req.method || 'POST', path: req.path, body: req.body, intent });
    return out.kind === 'needs_approval';
  } catch (e) {
    if (e instanceof ApprovalRequired) return true;
    if (e instanceof NotPerformed || e instanceof ApprovalDenied || e instanceof IdemgateError) return false; // execute says it
    throw e;
  }
}
