// Package scenarios is the stories idemgate tells about itself: an agent
// writes through the gateway to the reference ops API (naive: it ignores
// keys), faults happen, and each act is judged by the effects the API
// performed (GET /v1/effects), not by the HTTP answers. `idemgate demo`
// narrates them; the e2e drills that tell the same stories play them too,
// and assert more around them.
package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/control/client"
)

// Env is where the acts are played: the gateway in front of the ops API,
// who the agent, the operator and the approver are, and how to run the
// CLI for the acts an operator plays with it.
type Env struct {
	GatewayURL, APIURL string
	// AgentToken sends the writes; OperatorToken reads the audit
	// checkpoint; ApproverToken decides approvals (not the agent's).
	AgentToken, OperatorToken, ApproverToken string
	// StoreDSN is the gateway's store, for the CLI commands that read it.
	StoreDSN string
	// Tenant is the agent's tenant, whose audit log is exported.
	Tenant string
	// Dir is where files are written (the audit export); AuditKey is the
	// audit log's verifier key file and Checkpoints its checkpoints file.
	Dir, AuditKey, Checkpoints string
	// CLI runs an idemgate command and returns what it printed.
	CLI func(ctx context.Context, args ...string) (string, error)
	// Out receives the narration (nil: none); TTY draws progress bars.
	Out io.Writer
	TTY bool
	// Client sends every request (nil: one that keeps no connection, so
	// that Go's transport never re-sends a keyed request by itself).
	Client *http.Client
}

// Act is one story: what it shows, the effect it counts at the ops API,
// how many of them it must perform, and how it is played.
type Act struct {
	Title, Action string
	Kind, Unit    string // the effect counter (tickets_created) and its unit (ticket)
	Expected      int
	Play          func(ctx context.Context, e *Env, s *State) error
}

// State is what the acts of one play share, and what they sent.
type State struct {
	Run        string // keeps this play's keys its own
	AgentRun   string // the Idempotency-Run the agent sends
	Requests   int
	ticketKey  string
	ticketBody string
	// CaptureOp is the capture whose outcome was unknown, then resolved.
	CaptureOp string
}

// NewState starts a play whose keys end in run.
func NewState(run string) *State { return &State{Run: run, AgentRun: "agent-" + run} }

// Key is the key an act sends under name in this play.
func (s *State) Key(name string) string { return name + "-" + s.Run }

// Outcome is what one act did: the requests it sent, the effects it
// performed and expected, and its error, or a wrong count's.
type Outcome struct {
	Act      Act
	Requests int
	Effects  int
	Err      error
}

// Play plays acts in order, narrating them, and returns their outcomes.
func (e *Env) Play(ctx context.Context, s *State, acts []Act) []Outcome {
	out := make([]Outcome, 0, len(acts))
	for i, act := range acts {
		e.printf("\n%d/%d  %s\n", i+1, len(acts), act.Title)
		out = append(out, e.PlayOne(ctx, s, act))
	}
	return out
}

// PlayOne plays one act and counts what it did.
func (e *Env) PlayOne(ctx context.Context, s *State, act Act) Outcome {
	before := e.Effects(ctx)
	s.Requests = 0
	err := act.Play(ctx, e, s)
	got := e.Effects(ctx)[act.Kind] - before[act.Kind]
	if err != nil {
		e.Say("FAILED: %v", err)
	} else if got != act.Expected {
		err = fmt.Errorf("%s: %s, want %d", act.Action, Plural(got, act.Unit), act.Expected)
	}
	e.Say("effects: %s", Plural(got, act.Unit))
	return Outcome{Act: act, Requests: s.Requests, Effects: got, Err: err}
}

// Plural is n units, in words.
func Plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

func (e *Env) printf(format string, args ...any) {
	if e.Out != nil {
		fmt.Fprintf(e.Out, format, args...)
	}
}

// Say narrates, indented under the act's title.
func (e *Env) Say(format string, args ...any) { e.printf("     "+format+"\n", args...) }

// Reply is an answer as the agent sees it.
type Reply struct {
	Status int
	Header http.Header
	Body   string
}

// Replayed says the answer is a replay of the stored one.
func (r Reply) Replayed() bool { return r.Header.Get(contract.HeaderReplayed) == "true" }

// Problem is the answer's problem, if it is one.
func (r Reply) Problem() contract.Problem {
	p, _ := contract.ReadProblem(r.Header, []byte(r.Body))
	return p
}

// ID is the id of what the answer created (a ticket, a deployment).
func (r Reply) ID() int64 {
	var v struct{ ID int64 }
	_ = json.Unmarshal([]byte(r.Body), &v)
	return v.ID
}

var noReuse = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second}

// send sends one request as token's holder; the headers come in pairs. A
// request of the agent's (s not nil) is counted and carries its run.
func (e *Env) send(ctx context.Context, s *State, timeout time.Duration, method, url, token, body string,
	headers ...string) (Reply, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return Reply{}, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if s != nil {
		s.Requests++
		req.Header.Set(contract.HeaderRun, s.AgentRun) // which agent run sent it, in the audit log
	}
	client := e.Client
	if client == nil {
		client = noReuse
	}
	resp, err := client.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return Reply{resp.StatusCode, resp.Header, string(b)}, err
}

// control is the control API's client, as token's holder.
func (e *Env) control(token string) (*client.Client, error) {
	hc := e.Client
	if hc == nil {
		hc = noReuse
	}
	return client.New(e.GatewayURL, token, client.WithHTTPClient(hc))
}

// Post sends a keyed write of the agent's through the gateway.
func (e *Env) Post(ctx context.Context, s *State, path, key, body string, headers ...string) (Reply, error) {
	return e.send(ctx, s, 20*time.Second, "POST", e.GatewayURL+path, e.AgentToken, body,
		append([]string{contract.HeaderKey, key}, headers...)...)
}

// Fault arms the ops API's fault injection (it runs with --faults).
func (e *Env) Fault(ctx context.Context, spec string) error {
	r, err := e.send(ctx, nil, 5*time.Second, "POST", e.APIURL+"/_faults", "", spec)
	if err == nil && r.Status != 200 {
		err = fmt.Errorf("arm fault %s: %d %s", spec, r.Status, r.Body)
	}
	return err
}

// Effects reads the ops API's effect counters (empty on error: the act
// then shows a wrong count rather than hiding it).
func (e *Env) Effects(ctx context.Context) map[string]int {
	out := map[string]int{}
	r, err := e.send(context.WithoutCancel(ctx), nil, 5*time.Second, "GET", e.APIURL+"/v1/effects", "", "")
	if err == nil {
		_ = json.Unmarshal([]byte(r.Body), &out)
	}
	return out
}

// The acts, each with what it counts and expects.
var (
	ActLostAnswer = Act{"The agent's connection times out while its ticket is being created",
		"lost answer, retried with the same key", "tickets_created", "ticket", 1, LostAnswer}
	ActChangedPayload = Act{"The agent reuses that key for a different ticket", "changed payload under the same key",
		"tickets_created", "ticket", 0, ChangedPayload}
	ActConcurrent = Act{"50 copies of one request arrive at the same moment", "50 concurrent duplicates",
		"tickets_created", "ticket", 1, Concurrent}
	ActDuplicateAlert = Act{"The monitoring system sends the same alert twice, reworded, with new keys",
		"duplicate alert", "tickets_created", "ticket", 1, DuplicateAlert}
	ActMutableRef = Act{"The agent deploys the branch name main, then an image digest",
		"mutable deploy ref, then a digest", "deployments_started", "deployment", 1, MutableRef}
	ActPaymentUnknown = Act{"A payment capture times out: did the card get charged?",
		"capture timeout, unknown, resolved", "captures", "capture", 1, PaymentUnknown}
	ActApprovedDeploy = Act{"The agent deploys to production, which needs a human's approval",
		"production deploy, approved once", "deployments_started", "deployment", 1, ApprovedDeploy}
	ActAuditTrail = Act{"The customer asks: was my card charged twice?", "the audit log, verified offline",
		"captures", "capture", 0, AuditTrail}
)

// Demo is the demo's acts, in the order they tell the story.
func Demo() []Act {
	return []Act{ActLostAnswer, ActChangedPayload, ActConcurrent, ActDuplicateAlert, ActMutableRef,
		ActPaymentUnknown, ActApprovedDeploy, ActAuditTrail}
}
