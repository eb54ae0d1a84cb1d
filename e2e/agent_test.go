package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/agent"
	"github.com/idemgate/idemgate/ledger"
)

// The agent side against a real gateway in front of the counting ops API.

// call runs `idemgate call` as a process with the drill's agent token.
func (d *drill) call(journal string, args ...string) (map[string]any, int, string) {
	cmd := d.callCmd(journal, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatal(err)
	}
	var v map[string]any
	_ = json.Unmarshal(out.Bytes(), &v)
	return v, code, errb.String()
}

func (d *drill) callCmd(journal string, args ...string) *exec.Cmd {
	cmd := exec.Command(binary, append([]string{"call"}, args...)...)
	cmd.Env = append(os.Environ(), "IDEMGATE_TOKEN="+token, "IDEMGATE_URL="+d.gw.URL, "IDEMGATE_JOURNAL="+journal,
		"IDEMGATE_AGENT_SECRET="+agentSecret)
	return cmd
}

// A timeout after the upstream applied the write: the client asks the
// gateway, waits for the operation, and gets the one answer.
func TestAgentTimeoutAfterApplied(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	d.fault(`{"delay_ms":1500}`)
	j, err := agent.OpenJournal(context.Background(), filepath.Join(d.dir, "journal.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	c := &agent.Client{BaseURL: d.gw.URL, Token: token, Journal: j,
		HTTP:   &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 700 * time.Millisecond},
		Policy: agent.Policy{MaxAttempts: 10}}
	out, err := c.Do(context.Background(), agent.Action{Intent: "task-1/ticket", Method: "POST", Path: "/v1/tickets",
		Body: []byte(ticket("", "Slow ticket"))})
	if err != nil || out.Kind != agent.Replayed || out.Status != 201 || out.Attempts < 2 {
		t.Fatalf("%+v %v", out, err)
	}
	// It asked before sending again: the gateway logged the lookup by key.
	asked := 0
	for _, line := range d.gw.Logs() {
		if strings.Contains(line, `"method":"GET","path":"/_idem/v1/operations"`) {
			asked++
		}
	}
	if asked == 0 {
		t.Fatal("the client re-sent without asking the gateway first")
	}
	d.wantEffects("tickets_created", 1)
	wantState(t, d.operation(out.Key), ledger.Succeeded)
}

// The client process is SIGKILLed between attempts and started again on the
// same journal: it resumes the same key, and there is one effect.
func TestAgentKilledAndRestartedResumes(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{upstreamTimeout: "1m"})
	d.hold(1)
	journal := filepath.Join(d.dir, "journal.db")
	args := []string{"--intent", "task-2/ticket", "POST", "/v1/tickets", "-d", ticket("", "Agent restarted")}
	first := d.callCmd(journal, args...)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	var key string
	waitFor(t, "the first attempt at the gateway", func() bool {
		j, err := agent.OpenJournal(context.Background(), journal)
		if err != nil {
			return false
		}
		defer j.Close()
		e, err := j.Latest(context.Background(), "task-2/ticket")
		if err == nil {
			key = e.Key
		}
		return err == nil && d.exists(key)
	})
	d.waitInFlight(1)
	first.Process.Kill()
	first.Wait()
	d.release()

	out, code, stderr := d.call(journal, args...)
	if code != 0 || out["key"] != key || out["kind"] != "replayed" {
		t.Fatalf("restarted: exit %d %v %s, want key %s replayed", code, out, stderr, key)
	}
	d.wantEffects("tickets_created", 1)
}

// resume gives one effect, repeat a second; a changed payload on resume is
// refused locally and nothing is sent.
func TestAgentResumeRepeatAndChangedPayload(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	journal := filepath.Join(d.dir, "journal.db")
	body := ticket("", "Rotate keys")
	for i, want := range []string{"created", "replayed"} {
		if out, code, _ := d.call(journal, "--intent", "task-3", "POST", "/v1/tickets", "-d", body); code != 0 ||
			out["kind"] != want {
			t.Fatalf("resume %d: %d %v", i, code, out)
		}
	}
	d.wantEffects("tickets_created", 1)
	out, code, _ := d.call(journal, "--intent", "task-3", "--repeat", "POST", "/v1/tickets", "-d", body)
	if code != 0 || out["kind"] != "created" || out["intent"] != "task-3#2" {
		t.Fatalf("repeat: %d %v", code, out)
	}
	d.wantEffects("tickets_created", 2)

	_, code, stderr := d.call(journal, "--intent", "task-3", "POST", "/v1/tickets", "-d", ticket("", "Other"))
	if code != 2 {
		t.Fatalf("changed payload: exit %d, %s", code, stderr)
	}
	d.wantEffects("tickets_created", 2)
	if out, _, _ := d.call(journal, "status", "--intent", "task-3"); out["journal"].(map[string]any)["attempts"] != 2.0 {
		t.Fatalf("the refused call was sent: %v", out)
	}
}

// 429 with Retry-After: the client waits, then there is exactly one effect.
func TestAgentRateLimited(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	d.fault(`{"status":{"code":429,"count":1}}`)
	start := time.Now()
	out, code, stderr := d.call(filepath.Join(d.dir, "journal.db"), "--intent", "task-4", "POST", "/v1/tickets",
		"-d", ticket("", "Rate limited"))
	if code != 0 || out["kind"] != "created" || out["attempts"] != 2.0 {
		t.Fatalf("exit %d %v %s", code, out, stderr)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Fatalf("did not wait for Retry-After: %v", waited)
	}
	d.wantEffects("tickets_created", 1)
}

// Two agent processes start the same intent on one journal at the same
// moment: one key between them, one effect.
func TestAgentTwoProcessesOneJournal(t *testing.T) {
	t.Parallel()
	d := newDrill(t, setup{})
	d.fault(`{"delay_ms":300}`)
	journal := filepath.Join(d.dir, "journal.db")
	outs := make([]map[string]any, 4)
	codes := make([]int, 4)
	stderrs := make([]string, 4)
	concurrently(4, func(i int) {
		outs[i], codes[i], stderrs[i] = d.call(journal, "--intent", "task-6", "POST", "/v1/tickets", "-d", ticket("", "Shared"))
	})
	for i := range outs {
		if codes[i] != 0 || outs[i]["key"] != outs[0]["key"] {
			t.Fatalf("processes: %v %v %q", codes, outs, stderrs)
		}
	}
	d.wantEffects("tickets_created", 1)
}

// agentSecret is the secret the agents' processes derive their keys from,
// set so that none makes one in the home directory.
const agentSecret = "an-e2e-secret-of-more-than-sixteen-bytes"
