// LangGraph with idemgate: a node opens a ticket through the gateway, then
// interrupts for a human's confirmation. Resuming the thread re-runs the
// node from its start (LangGraph's rule): the effect, keyed by the thread
// and the node, is replayed; the ops API creates one ticket.
//
//   npm ci --prefix examples/typescript && node examples/typescript/langgraph.mjs

import { Annotation, Command, END, MemorySaver, START, StateGraph, interrupt } from '@langchain/langgraph';
import { idempotentEffect } from '@idemgate/client/langgraph';
import { RUN, client, ticketsCreated } from './common.mjs';

const idem = client();
const createTicket = idempotentEffect(idem, {
  name: 'create-ticket', request: (t) => ({ method: 'POST', path: '/v1/tickets', body: t }),
});
let runs = 0;
const State = Annotation.Root({ ticket: Annotation(), confirmed: Annotation() });
const graph = new StateGraph(State)
  .addNode('open', async (_state, config) => {
    runs++;
    const ticket = await createTicket({ project: 'OPS', title: 'Rotate the TLS keys', priority: 1 }, config);
    const confirmed = interrupt({ question: `Ticket ${ticket.id} opened: notify the on-call?` });
    return { ticket, confirmed };
  })
  .addEdge(START, 'open').addEdge('open', END)
  .compile({ checkpointer: new MemorySaver() });

const config = { configurable: { thread_id: RUN } };
const before = await ticketsCreated();
const paused = await graph.invoke({}, config);
console.log('interrupted:', paused.__interrupt__[0].value.question);
const done = await graph.invoke(new Command({ resume: 'yes' }), config);
const made = (await ticketsCreated()) - before;
console.log(`node runs: ${runs}; ticket ${done.ticket.id}, confirmed ${done.confirmed}; tickets created: ${made}`);
await idem.close();
process.exit(made === 1 ? 0 : 1);
