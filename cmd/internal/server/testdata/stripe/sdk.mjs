// Drives Stripe's official Node SDK through the gateway, as an application
// would, and prints one JSON line per call: what the SDK returned, or the
// error it raised. cmd/internal/server's TestStripeSDKRaisesOnRefusals
// judges the lines; this script judges nothing.
//
// Usage: node sdk.mjs GATEWAY_URL AGENT_TOKEN
import Stripe from 'stripe';

const [base, token] = process.argv.slice(2);
const url = new URL(base);

// The gateway's agent token is the SDK's API key: the gateway holds the
// upstream's real credentials. The SDK's own retries stay on (2, its
// default), with short delays: a refusal must raise even after them.
function client(key) {
  return new Stripe(key, {
    host: url.hostname, port: url.port, protocol: 'http', telemetry: false,
    maxNetworkRetries: 2, timeout: 10000,
  });
}

const stripe = client(token);

// report runs one call and says what the application would see.
async function report(name, call) {
  let line;
  try {
    const result = await call();
    line = {name, raised: false, id: result.id ?? null};
  } catch (err) {
    line = {
      name, raised: true, class: err.constructor.name, rawType: err.rawType ?? null, code: err.code ?? null,
      status: err.statusCode ?? null, operation_id: err.raw?.operation_id ?? null, state: err.raw?.state ?? null,
      status_url: err.raw?.status_url ?? null, header_operation: err.headers?.['idempotency-operation'] ?? null,
    };
  }
  console.log(JSON.stringify(line));
}

const destination = (name) => ({
  name, type: 'webhook_endpoint', event_payload: 'thin', enabled_events: ['v1.billing.meter.error_report_triggered'],
  webhook_endpoint: {url: 'https://example.com/hooks'},
});

// v1: form-encoded bodies.
await report('v1 create', () => stripe.customers.create({email: 'ada@example.com'}, {idempotencyKey: 'cus-1'}));
await report('v1 replay', () => stripe.customers.create({email: 'ada@example.com'}, {idempotencyKey: 'cus-1'}));
await report('v1 changed', () => stripe.customers.create({email: 'bob@example.com'}, {idempotencyKey: 'cus-1'}));
await report('v1 lost', () => stripe.customers.create({email: 'lost@example.com'}, {idempotencyKey: 'cus-2'}));
await report('v1 lost again', () => stripe.customers.create({email: 'lost@example.com'}, {idempotencyKey: 'cus-2'}));
// v2: JSON bodies.
await report('v2 create', () => stripe.v2.core.eventDestinations.create(destination('a'), {idempotencyKey: 'ed-1'}));
await report('v2 changed', () => stripe.v2.core.eventDestinations.create(destination('b'), {idempotencyKey: 'ed-1'}));
await report('v2 lost', () => stripe.v2.core.eventDestinations.create(destination('lost'), {idempotencyKey: 'ed-2'}));
await report('v2 lost again', () => stripe.v2.core.eventDestinations.create(destination('lost'), {idempotencyKey: 'ed-2'}));
// The gateway's own refusals on these routes: a bad key, a missing role,
// a path no route serves.
await report('bad token', () => client('sk_wrong').customers.create({email: 'eve@example.com'}, {idempotencyKey: 'cus-3'}));
await report('no role', () => stripe.refunds.create({charge: 'ch_1'}, {idempotencyKey: 're-1'}));
await report('no route', () => stripe.customers.retrieve('cus_1'));
