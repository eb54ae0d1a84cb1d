// An app built on LangGraph that the tests kill: one thread of a graph
// START -> act -> END whose node makes its effect through the gateway
// (idempotentEffect, a keyed request), checkpointed to a file. Killed
// after the effect, before the node's write was checkpointed, it is then
// resumed from its checkpoint in a new process (invoke(null) on the same
// thread). Prints {"event":"done"} at the end.

import { Annotation, END, START, StateGraph } from '@langchain/langgraph';
import { Client } from '@idemgate/client';
import { idempotentEffect } from '@idemgate/client/langgraph';
import { FileSaver } from './filesaver.mjs';

const a = JSON.parse(process.argv[2]);
const client = new Client({ url: a.url, token: 'agent-token', journal: a.journal });
const createTicket = idempotentEffect(client, {
  name: 'create-ticket', request: (t) => ({ path: `/v1/effects/${a.tag}`, body: t }),
});
const State = Annotation.Root({ title: Annotation(), ticket: Annotation() });
const graph = new StateGraph(State)
  .addNode('act', async (state, config) => ({ ticket: await createTicket({ title: state.title }, config) }))
  .addEdge(START, 'act').addEdge('act', END)
  .compile({ checkpointer: new FileSaver(a.checkpoints) });
const config = { configurable: { thread_id: a.thread }, durability: 'sync' };
const out = a.step === 'start' ? await graph.invoke({ title: 'Disk full' }, config) : await graph.invoke(null, config);
process.stdout.write(JSON.stringify({ event: 'done', ticket: out.ticket }) + '\n');
await client.close();
