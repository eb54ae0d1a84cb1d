// What a TypeScript user writes: checked against the declarations
// (npm run typecheck; types.test.js runs it).
import { Client, IdemgateError, Conflict, ApprovalRequired, NotPerformed, idempotent, type Outcome } from '@idemgate/client';
import { idempotentTool as aiTool } from '@idemgate/client/ai';
import { idempotentTool as agentsTool } from '@idemgate/client/openai-agents';
import { idempotentEffect } from '@idemgate/client/langgraph';

export async function use(): Promise<number> {
  const client = new Client({ url: 'http://127.0.0.1:8080', token: 't', journal: 'j.jsonl', timeout: 5000 });
  const id: string = await client.action('reply.send', { key: 'k', command: { a: 1 } }, async (op) => {
    if (op.lost) throw new NotPerformed('lost');
    return op.operationId;
  });
  const r = await client.perform('reply.send', { intent: 'i', command: null }, () => 1);
  const n: number = r.result;
  const out: Outcome = await client.request({ method: 'POST', path: '/v1/tickets', body: { title: 'x' }, intent: 'task-1' });
  if (!out.ok) console.log(out.kind, out.reason, out.nextStep);
  const render = idempotent(async (order: string, v: number) => ({ pdf: `${order}-${v}` }), { client, action: 'pdf.render', key: (o, v) => `${o}:${v}` });
  const pdf: { pdf: string } = await render('o', 1);
  try {
    await client.action('x', { key: 'k' }, () => null);
  } catch (e) {
    if (e instanceof Conflict || e instanceof ApprovalRequired) console.log(e.code, e.status, e.operationId);
    if (e instanceof IdemgateError) console.log(e.code);
  }
  const t = aiTool(client, { description: 'd', execute: async ({ title }: { title: string }) => title }, { name: 'createTicket', action: 'ticket.create', run: 'chat-1' });
  const a = agentsTool(client, { name: 'create', description: 'd', execute: async ({ title }: { title: string }) => title }, { action: 'ticket.create', run: (ctx) => String(ctx.context) });
  const e = idempotentEffect(client, { name: 'e', request: (x: { t: string }) => ({ path: '/v1/x', body: x }) });
  await e({ t: 'x' }, { configurable: { thread_id: 't' } });
  await client.close();
  return id.length + n + pdf.pdf.length + (t ? 1 : 0) + (a ? 1 : 0);
}
