package e2e

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/ledger"
)

// The API article's drills: the ops API in its default mode is itself an
// idempotent API (httpidem, completion in the business transaction), and
// these drills hit it directly, without the gateway, unless said otherwise.

// The server completes, then the response is dropped.
func TestDrillServerCompletesThenResponseDropped(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{idempotentAPI: true})
	d.fault(`{"drop_response_after_commit":1}`)
	body := ticket("", "Disk full on db-2")
	if r := d.direct("/v1/tickets", "a-1", body); r.err == nil {
		t.Fatalf("the answer should have been lost: %+v", r)
	}
	r := d.direct("/v1/tickets", "a-1", body)
	if r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" || !strings.Contains(r.body, `"created":true`) {
		t.Fatalf("retry: %+v", r)
	}
	d.wantEffects("tickets_created", 1)
	wantState(t, d.apiOperation("a-1"), ledger.Succeeded)
}

// Concurrent copies with one key.
func TestDrillConcurrentCopiesOneKey(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{idempotentAPI: true})
	d.fault(`{"delay_ms":200}`)
	body := `{"order_id":"ord-1","amount_minor":4999,"currency":"EUR","payee":"ACME SAS","invoice_ref":"INV-1"}`
	var answers [20]reply
	concurrently(20, func(i int) { answers[i] = d.direct("/v1/payment-intents", "a-2", body, "Prefer", "wait=10") })
	fresh := 0
	for _, a := range answers {
		if a.status != 201 || a.body != answers[0].body {
			t.Fatalf("copies: %+v", answers)
		}
		if a.header.Get("Idempotent-Replayed") != "true" {
			fresh++
		}
	}
	if fresh != 1 {
		t.Fatalf("%d copies executed, want 1", fresh)
	}
	d.wantEffects("intents_created", 1)
}

// The key is reused with a changed payload.
func TestDrillKeyReusedWithChangedPayload(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{idempotentAPI: true})
	body := `{"order_id":"ord-2","amount_minor":1000,"currency":"EUR","payee":"ACME SAS","invoice_ref":"INV-2"}`
	if r := d.direct("/v1/payment-intents", "a-3", body); r.status != 201 {
		t.Fatal(r)
	}
	changed := strings.Replace(body, "1000", "100000", 1)
	want(t, d.direct("/v1/payment-intents", "a-3", changed), 422, "fingerprint_mismatch")
	d.wantEffects("intents_created", 1)
}

// The worker is killed after reserving and before completing: the business
// write and the completion share one transaction, so nothing was applied,
// and the operation is unknown until reconciled, never silently re-run.
func TestDrillWorkerKilledAfterReserving(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{idempotentAPI: true, apiLease: time.Second})
	d.hold(1)
	body := ticket("", "Worker crash")
	go d.direct("/v1/tickets", "a-4", body)
	waitFor(t, "the reservation", func() bool { return readable(d.apiDB, "default", "a-4") })
	d.api.Kill()
	d.startAPI()
	want(t, d.untilSettledBy(func() reply { return d.direct("/v1/tickets", "a-4", body) }), 409, "outcome_unknown")
	wantState(t, d.apiOperation("a-4"), ledger.Unknown)
	d.wantEffects("tickets_created", 0)
}

// The agent restarts between attempts: a client process persists its key
// before sending, is SIGKILLed while waiting, and its next incarnation
// sends the same key and gets the one answer.
func TestDrillAgentRestartsBetweenAttempts(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{upstreamTimeout: "1m"})
	d.hold(1)
	journal := filepath.Join(d.dir, "agent.journal")
	first, lines := startAgent(t, d, journal)
	sent := <-lines
	if !strings.HasPrefix(sent, "sending ") {
		t.Fatalf("first agent said %q", sent)
	}
	key := strings.TrimPrefix(sent, "sending ")
	d.waitInFlight(1)
	first.Process.Kill()
	first.Wait()
	d.release()

	second, lines := startAgent(t, d, journal)
	resumed, answer := <-lines, <-lines
	second.Wait()
	if resumed != "resuming "+key || answer != "201 replayed" {
		t.Fatalf("second agent said %q then %q, want to resume %s and get the one answer", resumed, answer, key)
	}
	if op := d.operation(key); op.State != ledger.Succeeded {
		t.Fatalf("operation %s", op.State)
	}
	d.wantEffects("tickets_created", 1)
}

// startAgent runs this test binary as an agent process (see runAgent).
func startAgent(t *testing.T, d *drill, journal string) (*exec.Cmd, <-chan string) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "IDEMGATE_E2E_AGENT="+journal, "IDEMGATE_E2E_GATEWAY="+d.gw.URL)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := make(chan string, 4)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, lines
}

// runAgent is the agent process: it takes its key from the journal, or
// makes one and writes it there durably before sending anything, then
// sends the request, waiting for an in-flight one, and prints the outcome.
func runAgent(journal, gateway string) int {
	key, verb := "", "resuming"
	if b, err := os.ReadFile(journal); err == nil {
		key = strings.TrimSpace(string(b))
	} else {
		buf := make([]byte, 16)
		rand.Read(buf)
		key, verb = "agent-"+hex.EncodeToString(buf), "sending"
		if err := writeDurably(journal, key); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Println(verb, key)
	r := do("POST", gateway+"/v1/tickets", ticket("", "Agent task"), "Authorization", "Bearer "+token,
		"Idempotency-Key", key, "Prefer", "wait=15")
	replayed := ""
	if r.header.Get("Idempotent-Replayed") == "true" {
		replayed = " replayed"
	}
	fmt.Printf("%d%s\n", r.status, replayed)
	return 0
}

func writeDurably(path, content string) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
