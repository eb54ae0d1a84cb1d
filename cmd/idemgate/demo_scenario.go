package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/contract"
)

// demoStep is one act of the scenario: what it shows, the effect it
// counts at the ops API, and how many of them it must perform.
type demoStep struct {
	title, action string
	kind, unit    string
	expected      int
	run           func(ctx context.Context, e *demoEnv, s *demoState) error
}

// demoState is what the acts share, and what they sent.
type demoState struct {
	run        string // a suffix that keeps this run's keys its own
	ticketKey  string
	ticketBody string
	requests   int
	captureOp  string // the capture whose outcome was unknown, then resolved
}

// demoScenario is the acts, in order. (A function, not a variable: the
// last act runs the CLI, which holds the demo command.)
func demoScenario() []demoStep {
	return []demoStep{
		{"The agent's connection times out while its ticket is being created", "lost answer, retried with the same key",
			"tickets_created", "ticket", 1, demoLostAnswer},
		{"The agent reuses that key for a different ticket", "changed payload under the same key",
			"tickets_created", "ticket", 0, demoChangedPayload},
		{"50 copies of one request arrive at the same moment", "50 concurrent duplicates",
			"tickets_created", "ticket", 1, demoConcurrent},
		{"The monitoring system sends the same alert twice, reworded, with new keys", "duplicate alert",
			"tickets_created", "ticket", 1, demoDuplicateAlert},
		{"The agent deploys the branch name main, then an image digest", "mutable deploy ref, then a digest",
			"deployments_started", "deployment", 1, demoMutableRef},
		{"A payment capture times out: did the card get charged?", "capture timeout, unknown, resolved",
			"captures", "capture", 1, demoPaymentUnknown},
		{"The agent deploys to production, which needs a human's approval", "production deploy, approved once",
			"deployments_started", "deployment", 1, demoApprovedDeploy},
		{"The customer asks: was my card charged twice?", "the audit log, verified offline",
			"captures", "capture", 0, demoAuditTrail},
	}
}

// play runs every act and prints the table; it returns how many acts
// performed the wrong number of effects (or failed outright).
func (e *demoEnv) play(ctx context.Context, steps []demoStep) int {
	start := time.Now()
	fmt.Fprintf(e.out, "idemgate demo: an agent writes through the gateway (%s) to an ops API that\n"+
		"ignores idempotency keys (%s). Effects are counted at the API.\n", e.gwURL, e.apiURL)
	s := &demoState{run: randomHex(3)}
	e.agentRun = "demo-agent-" + s.run
	var rows [][]string
	failed := 0
	for i, st := range steps {
		fmt.Fprintf(e.out, "\n%d/%d  %s\n", i+1, len(steps), st.title)
		before := e.effects()
		s.requests = 0
		err := st.run(ctx, e, s)
		got := e.effects()[st.kind] - before[st.kind]
		verdict := "ok"
		if err != nil || got != st.expected {
			verdict, failed = "WRONG", failed+1
		}
		if err != nil {
			e.say("FAILED: %v", err)
		}
		e.say("effects: %s", plural(got, st.unit))
		rows = append(rows, []string{st.action, fmt.Sprint(s.requests), plural(got, st.unit),
			fmt.Sprint(st.expected), verdict})
	}
	printDemoTable(e.out, rows)
	fmt.Fprintf(e.out, "\n%d acts in %.1fs; %d wrong.\n", len(steps), time.Since(start).Seconds(), failed)
	return failed
}

func printDemoTable(out io.Writer, rows [][]string) {
	width := len("ACTION")
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	line := func(c ...string) {
		fmt.Fprintf(out, "  %-*s  %8s  %-12s  %8s  %s\n", width, c[0], c[1], c[2], c[3], c[4])
	}
	fmt.Fprintln(out)
	line("ACTION", "REQUESTS", "EFFECTS", "EXPECTED", "")
	for _, r := range rows {
		line(r...)
	}
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// say narrates, indented under the act's title.
func (e *demoEnv) say(format string, args ...any) {
	fmt.Fprintf(e.out, "     "+format+"\n", args...)
}

// demoReply is an answer as the agent sees it.
type demoReply struct {
	status int
	header http.Header
	body   string
}

func (r demoReply) replayed() bool { return r.header.Get("Idempotent-Replayed") == "true" }

func (r demoReply) problem() (code, detail string) {
	var p struct{ Code, Detail string }
	_ = json.Unmarshal([]byte(r.body), &p)
	return p.Code, p.Detail
}

func (r demoReply) id() int64 {
	var v struct{ ID int64 }
	_ = json.Unmarshal([]byte(r.body), &v)
	return v.ID
}

var demoClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 20 * time.Second}

// send sends one request as the agent (or, with token, someone else); the
// headers come in pairs.
func (e *demoEnv) send(ctx context.Context, s *demoState, timeout time.Duration, method, url, body string,
	headers ...string) (demoReply, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		return demoReply{}, err
	}
	req.Header.Set("Authorization", "Bearer "+demoAgentToken)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(contract.HeaderRun, e.agentRun) // which agent run sent it, in the audit log
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	if s != nil {
		s.requests++
	}
	resp, err := demoClient.Do(req)
	if err != nil {
		return demoReply{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return demoReply{resp.StatusCode, resp.Header, string(b)}, err
}

// post sends a keyed write through the gateway.
func (e *demoEnv) post(ctx context.Context, s *demoState, path, key, body string, headers ...string) (demoReply, error) {
	return e.send(ctx, s, 20*time.Second, "POST", e.gwURL+path, body,
		append([]string{"Idempotency-Key", key}, headers...)...)
}

// fault arms the ops API's fault injection.
func (e *demoEnv) fault(ctx context.Context, spec string) error {
	r, err := e.send(ctx, nil, 5*time.Second, "POST", e.apiURL+"/_faults", spec)
	if err == nil && r.status != 200 {
		err = fmt.Errorf("arm fault %s: %d %s", spec, r.status, r.body)
	}
	return err
}

// effects reads the ops API's effect counters (empty on error: the act
// then shows a wrong count rather than hiding it).
func (e *demoEnv) effects() map[string]int {
	out := map[string]int{}
	r, err := e.send(context.Background(), nil, 5*time.Second, "GET", e.apiURL+"/v1/effects", "")
	if err == nil {
		_ = json.Unmarshal([]byte(r.body), &out)
	}
	return out
}

// progress draws the concurrent act's answers as they arrive.
type progress struct {
	mu    sync.Mutex
	out   io.Writer
	tty   bool
	done  int
	total int
}

func (p *progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if !p.tty {
		return
	}
	const width = 25
	bar := strings.Repeat("#", p.done*width/p.total) + strings.Repeat(".", width-p.done*width/p.total)
	fmt.Fprintf(p.out, "\r     answers [%s] %d/%d", bar, p.done, p.total)
	if p.done == p.total {
		fmt.Fprint(p.out, "\r\033[K")
	}
}

func jsonUnmarshal(s string, v any) error { return json.Unmarshal([]byte(s), v) }
