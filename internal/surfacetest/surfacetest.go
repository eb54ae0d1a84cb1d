// Package surfacetest is the suite every surface of idemgate passes: one
// set of guarantees (docs/design.md) run against each way a command
// reaches the keyed executor — an HTTP route, an action, an MCP tool
// call, a NATS or AMQP consumer, a signed webhook — on each store. It is
// to surfaces what ledger/storetest is to stores (and river's
// riverdrivertest to drivers): the guarantee is written once, here, and
// a surface proves it by implementing Surface where the real server is
// wired (cmd/internal/server's surfaces_test.go), never with a mock.
//
// Effects are counted at the upstream, by a marker each case puts in its
// command, so that one gateway serves every case of a store at once.
package surfacetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// Outcome is what a surface's answer says, in the executor's words.
type Outcome string

// The outcomes a surface maps its transport's answer to.
const (
	Executed   Outcome = "executed"    // run now; the upstream's answer
	Replayed   Outcome = "replayed"    // the recorded answer, nothing sent
	Refused    Outcome = "refused"     // a changed command under a used key
	Unknown    Outcome = "unknown"     // sent, and no answer: never re-sent
	Released   Outcome = "released"    // not sent: free for a retry
	InProgress Outcome = "in_progress" // a copy is running
	Pending    Outcome = "pending"     // waits for a person's approval
	TooLarge   Outcome = "too_large"   // over the surface's input bound
	Other      Outcome = "other"       // anything else, a failure of the case
)

// Upstream is how the upstream a call reaches behaves.
type Upstream int

// The upstreams a surface routes a call to.
const (
	// Answers applies the command and answers.
	Answers Upstream = iota
	// LosesAnswer applies the command, and its answer never arrives (the
	// connection is cut, the MCP server dies, the action's caller dies).
	LosesAnswer
	// Breakable answers, except while Breaker.Down holds: then nothing
	// can be sent to it (connection refused).
	Breakable
	// NeedsApproval answers, once an approver of the tenant approved the
	// command (the surface's approval policy holds every such call).
	NeedsApproval
)

// Call is one command sent on a surface.
type Call struct {
	Tenant   string // TenantA or TenantB
	Key      string // the caller's key: Idempotency-Key, intent, event or message id
	Marker   string // unique to the case; the upstream counts effects by it
	Variant  string // another Variant is another command under the same key
	Upstream Upstream
	// Oversize asks for a command over the surface's bound on its input
	// (the surface pads it past its own limit).
	Oversize bool
}

// The two tenants every surface serves.
const (
	TenantA = "acme"
	TenantB = "globex"
)

// Answer is a surface's answer, mapped to the executor's terms.
type Answer struct {
	Outcome Outcome
	// Body is the answer's result as its client reads it (HTTP body, the
	// MCP result's content, the action's result); empty where the surface
	// has no answer (consumers).
	Body []byte
	// OpID is the operation's id, where the surface says it.
	OpID string
	// Parked holds a consumer message's dead-letter headers, if parked.
	Parked map[string]string
}

// Surface is one way commands reach the executor, wired as it runs.
type Surface interface {
	// Name names the surface in subtests: http, action, mcp, nats, amqp, webhook.
	Name() string
	// Store is the store the gateway behind the surface uses.
	Store() ledger.Store
	// Send sends c and returns the answer once the surface has one (for a
	// consumer: once the message was handled, acknowledged or parked).
	Send(t testing.TB, c Call) Answer
	// Effects counts the upstream's effects of the commands carrying marker.
	Effects(t testing.TB, marker string) int
	// Key is the identity of the operation a call makes.
	Key(c Call) ledger.OpKey
	// Skips names the guarantees that do not apply to the surface, each
	// with why.
	Skips() map[string]string
}

// Breaker takes a surface's Breakable upstream down (connections refused)
// and brings it back.
type Breaker interface {
	Down(t testing.TB)
	Up(t testing.TB)
}

// Redeliverer is a surface whose transport retries a released command on
// its own (a broker delivers the message again after a delay): its
// retry may find the command already run by that redelivery.
type Redeliverer interface {
	Redelivers() bool
}

// Decider decides an approval through the control API, as the tenant's
// requester or as its approver, echoing fingerprint; it returns the
// HTTP status of the decision.
type Decider interface {
	Decide(t testing.TB, tenant, approvalID, fingerprint string, asRequester bool) int
}

// Copier sends n copies of c at once, where a surface must send them
// itself (a consumer publishes them as one batch, then waits).
type Copier interface {
	SendCopies(t testing.TB, c Call, n int) []Answer
}

// Run runs every guarantee against every surface. The surfaces of one
// store share one gateway: cases use keys of their own and run in
// parallel, except those that break an upstream, which hold their
// surface alone.
func Run(t *testing.T, surfaces []Surface) {
	// The surfaces of a gateway may share the upstream a Breaker takes
	// down: one surface's case at a time breaks it, so that its Up is
	// the upstream back.
	var breaking sync.Mutex
	for _, s := range surfaces {
		lock := &sync.RWMutex{}
		t.Run(s.Name(), func(t *testing.T) {
			t.Parallel()
			for _, g := range guarantees {
				t.Run(g.name, func(t *testing.T) {
					if why := s.Skips()[g.name]; why != "" {
						t.Skip(why)
					}
					if g.alone {
						lock.Lock()
						defer lock.Unlock()
						if g.name == "NotSentIsReleased" {
							breaking.Lock()
							defer breaking.Unlock()
						}
					} else {
						t.Parallel()
						lock.RLock()
						defer lock.RUnlock()
					}
					g.run(t, s, newCase(t, s))
				})
			}
		})
	}
	t.Run("Namespaces", func(t *testing.T) { testNamespaces(t, surfaces) })
}

// guarantee is one subtest of each surface.
type guarantee struct {
	name  string
	alone bool // breaks an upstream: the surface's other cases wait
	run   func(t *testing.T, s Surface, c Call)
}

var guarantees = []guarantee{
	{"Storm", false, testStorm},
	{"Replay", false, testReplay},
	{"ChangedCommandRefused", false, testChanged},
	{"SentWithoutAnswerIsUnknown", true, testUnknown},
	{"NotSentIsReleased", true, testReleased},
	{"AuditPerTransition", false, testAudit},
	{"ApprovalBoundToFingerprint", false, testApproval},
	{"Tenants", false, testTenants},
	{"InputBounded", false, testInputBounded},
}

// runID makes keys and markers unique across runs on a shared broker.
var runID = fmt.Sprint(time.Now().UnixNano())

// newCase is a call of tenant A under a key and marker of the case's own.
func newCase(t *testing.T, s Surface) Call {
	id := fmt.Sprintf("%s-%s-%s", s.Name(), sanitize(t.Name()), runID)
	return Call{Tenant: TenantA, Key: "k-" + id, Marker: "m-" + id, Variant: "a", Upstream: Answers}
}

func sanitize(name string) string {
	b := []byte(name)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			b[i] = '-'
		}
	}
	return string(b)
}
