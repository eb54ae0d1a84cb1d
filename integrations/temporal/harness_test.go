package idemtemporal_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/idemgate/idemgate/control/client"
	"github.com/idemgate/idemgate/integrations/temporal"
	"github.com/idemgate/idemgate/internal/testenv"
)

// bin is idemgate, built once from this repository for all the tests.
var bin string

func TestMain(m *testing.M) {
	os.Exit(testenv.MainWithIdemgate(m, &bin))
}

// The principals: the worker reserves (and holds the approver role, so
// that the rule "never the requester" is what stops it approving its own
// refund), alice resolves, bob approves.
const (
	workerToken = "worker-token"
	aliceToken  = "alice-token"
	bobToken    = "bob-token"
)

const config = `listen: 127.0.0.1:0
store: %s
sweep_interval: 100ms
principals:
  - {name: worker, tenant: acme, roles: [agent, approver], token_sha256: %s}
  - {name: alice, tenant: acme, roles: [admin], token_sha256: %s}
  - {name: bob, tenant: acme, roles: [approver], token_sha256: %s}
actions:
  - {name: support.reply.send, lease: 30s, roles: [agent]}
  - name: refund.issue
    lease: 30s
    roles: [agent]
    approval: {ttl: 1h, approvers: [approver], summary: 'Refund {{.body.amount_minor}} to {{.body.customer}}'}
`

// rig is a real gateway on a store of the test's own, the upstream where
// the activities perform their effects, and the clients of the three
// principals.
type rig struct {
	t                  *testing.T
	up                 *testenv.Upstream
	url                string
	worker, alice, bob *client.Client
}

func newRig(t *testing.T, store string) *rig {
	t.Helper()
	dsn := testenv.StoreDSN(t, store)
	gw := testenv.ServeGateway(t, bin, fmt.Sprintf(config, dsn,
		testenv.TokenSHA256(workerToken), testenv.TokenSHA256(aliceToken), testenv.TokenSHA256(bobToken)))
	r := &rig{t: t, up: testenv.NewUpstream(t), url: gw.URL}
	r.worker, r.alice, r.bob = r.client(workerToken), r.client(aliceToken), r.client(bobToken)
	return r
}

func (r *rig) client(token string) *client.Client {
	c, err := client.New(r.url, token)
	if err != nil {
		r.t.Fatal(err)
	}
	return c
}

// eachStore runs test on a rig on each store.
func eachStore(t *testing.T, test func(t *testing.T, r *rig)) {
	for _, store := range testenv.Stores {
		t.Run(store, func(t *testing.T) { test(t, newRig(t, store)) })
	}
}

// env is a Temporal test environment whose worker has the interceptor,
// the test's activities and AwaitSettled, for the workflow id id.
func (r *rig) env(id string, a *acts) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.SetTestTimeout(2 * time.Minute) // wall clock: the gateway is a real process, on a shared machine
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{idemtemporal.NewInterceptor(r.worker)}})
	env.SetStartWorkflowOptions(startOptions(id))
	env.RegisterActivity(a)
	idemtemporal.Register(env)
	return env
}

// report says the count the closing note quotes.
func report(t *testing.T, what string, n int) {
	t.Logf("EFFECTS temporal %s %s: %d", t.Name(), what, n)
}

// Ticket is the command of a reply.
type Ticket struct {
	ID      string `json:"id"`
	Version int    `json:"version"`
}

// Sent is what the upstream answered an effect.
type Sent struct {
	Effect string `json:"effect"`
}

// acts are the test's activities; each counts its runs, not its effects
// (the upstream counts those).
type acts struct {
	up    *testenv.Upstream
	runs  atomic.Int32
	after func(ctx context.Context, run int32) error // called after Perform returned, in the activity's run-th run
	// effectErr, when set, is what the effect returns after the upstream
	// performed it (the answer lost on the way back).
	effectErr error
}

// post performs one effect at the upstream.
func post(ctx context.Context, up *testenv.Upstream, name string) (Sent, error) {
	effect, err := testenv.PostEffect(ctx, up.URL, name)
	return Sent{Effect: effect}, err
}
