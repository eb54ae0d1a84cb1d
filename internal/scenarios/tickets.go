package scenarios

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/idemgate/idemgate/contract"
	"github.com/idemgate/idemgate/internal/together"
)

// Ticket is a ticket's body; event, if set, is its source_event_id (the
// route's business key).
func Ticket(title, event string) string {
	src := ""
	if event != "" {
		src = fmt.Sprintf(`,"source_event_id":%q`, event)
	}
	return fmt.Sprintf(`{"project":"OPS","title":%q,"priority":2,"description":"opened by the agent"%s}`, title, src)
}

// LostAnswer: the API is slow, the agent's connection times out while the
// gateway waits; the retry with the same key gets the stored answer.
func LostAnswer(ctx context.Context, e *Env, s *State) error {
	if err := e.Fault(ctx, `{"delay_ms":1500}`); err != nil {
		return err
	}
	s.ticketKey, s.ticketBody = s.Key("ticket"), Ticket("Disk full on db-1", "")
	e.Say("POST /v1/tickets  %s: %s   (the API takes 1.5s today)", contract.HeaderKey, s.ticketKey)
	_, err := e.send(ctx, s, 500*time.Millisecond, "POST", e.GatewayURL+"/v1/tickets", e.AgentToken, s.ticketBody,
		contract.HeaderKey, s.ticketKey)
	if err == nil {
		return errors.New("the first attempt should have timed out")
	}
	e.Say("-> no answer after 0.5s: the agent cannot tell whether the ticket exists")
	if err := e.Fault(ctx, `{"delay_ms":0}`); err != nil {
		return err
	}
	r, err := e.Post(ctx, s, "/v1/tickets", s.ticketKey, s.ticketBody, contract.HeaderPrefer, "wait=10")
	if err != nil {
		return err
	}
	if r.Status != 201 || !r.Replayed() {
		return fmt.Errorf("the retry got %d (replayed %t): %s", r.Status, r.Replayed(), r.Body)
	}
	e.Say("retry, same key -> 201, %s: true: the stored answer, ticket #%d", contract.HeaderReplayed, r.ID())
	return nil
}

// ChangedPayload: LostAnswer's key reused for another ticket is refused,
// and the refusal reveals nothing of the stored request.
func ChangedPayload(ctx context.Context, e *Env, s *State) error {
	if s.ticketKey == "" {
		return errors.New("no key to reuse: LostAnswer did not run")
	}
	body := strings.Replace(s.ticketBody, "Disk full on db-1", "Rotate the TLS certificates", 1)
	e.Say("POST /v1/tickets  %s: %s   (same key, another title)", contract.HeaderKey, s.ticketKey)
	r, err := e.Post(ctx, s, "/v1/tickets", s.ticketKey, body)
	if err != nil {
		return err
	}
	p := r.Problem()
	if r.Status != 422 || p.Code != contract.CodeFingerprintMismatch || strings.Contains(r.Body, "Disk full") {
		return fmt.Errorf("got %d %s: %s", r.Status, p.Code, r.Body)
	}
	e.Say("-> 422 %s: %s", p.Code, p.Detail)
	return nil
}

// Concurrent: 50 copies of one request at the same moment, each willing
// to wait: one executes, the others get its answer.
func Concurrent(ctx context.Context, e *Env, s *State) error {
	if err := e.Fault(ctx, `{"delay_ms":300}`); err != nil {
		return err
	}
	defer e.Fault(context.WithoutCancel(ctx), `{"delay_ms":0}`)
	const n = 50
	key, body := s.Key("storm"), Ticket("Queue backlog over 10k", "")
	e.Say("50 x POST /v1/tickets  %s: %s   (%s: wait=10)", contract.HeaderKey, key, contract.HeaderPrefer)
	p := &progress{e: e, total: n}
	replies, errs := make([]Reply, n), make([]error, n)
	together.At(n, func(i int) {
		replies[i], errs[i] = e.send(ctx, nil, 20*time.Second, "POST", e.GatewayURL+"/v1/tickets", e.AgentToken, body,
			contract.HeaderKey, key, contract.HeaderPrefer, "wait=10")
		p.tick()
	})
	s.Requests += n
	replays := 0
	for i, r := range replies {
		if errs[i] != nil || r.Status != 201 || r.Body != replies[0].Body {
			return fmt.Errorf("answer %d: %d %v %s", i, r.Status, errs[i], r.Body)
		}
		if r.Replayed() {
			replays++
		}
	}
	e.Say("-> 50 answers, all 201 with ticket #%d: %d executed, %d replayed", replies[0].ID(), n-replays, replays)
	return nil
}

// DuplicateAlert: the same alert twice, reworded, under two keys: the
// route's business key gives the second the first one's answer.
func DuplicateAlert(ctx context.Context, e *Env, s *State) error {
	event := s.Key("evt")
	first, err := e.Post(ctx, s, "/v1/tickets", s.Key("alert-a"), Ticket("DB primary down", event))
	if err != nil {
		return err
	}
	e.Say("alert 1, source_event_id %s: %q -> %d, ticket #%d", event, "DB primary down", first.Status, first.ID())
	dup, err := e.Post(ctx, s, "/v1/tickets", s.Key("alert-b"), Ticket("Database primary is down!", event))
	if err != nil {
		return err
	}
	of := dup.Header.Get(contract.HeaderDuplicateOf)
	if first.Status != 201 || dup.Body != first.Body || of == "" || of != first.Header.Get(contract.HeaderOperation) {
		return fmt.Errorf("duplicate: %d %s (duplicate of %q)", dup.Status, dup.Body, of)
	}
	e.Say("alert 2, same event, reworded, new key: %q -> ticket #%d again", "Database primary is down!", dup.ID())
	e.Say("   (%s: %s)", contract.HeaderDuplicateOf, of)
	return nil
}

// progress draws the concurrent act's answers as they arrive.
type progress struct {
	mu    sync.Mutex
	e     *Env
	done  int
	total int
}

func (p *progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if !p.e.TTY {
		return
	}
	const width = 25
	bar := strings.Repeat("#", p.done*width/p.total) + strings.Repeat(".", width-p.done*width/p.total)
	p.e.printf("\r     answers [%s] %d/%d", bar, p.done, p.total)
	if p.done == p.total {
		p.e.printf("\r\033[K")
	}
}
