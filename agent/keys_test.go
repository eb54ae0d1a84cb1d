package agent

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const testSecret = "a-test-secret-of-more-than-sixteen-bytes"

// The key of an intent's version is HMAC-SHA256, under the agent's
// secret, of the RFC 8785 form of {"agent","intent","use","version"}:
// the vectors were computed apart, with Python's hmac and json modules,
// and the Python client's tests check the same ones.
func TestKeyVectors(t *testing.T) {
	k := mustKeys(t, testSecret, "agent-7")
	anon := mustKeys(t, testSecret, "")
	for _, c := range []struct {
		keys    *Keys
		intent  string
		version int
		want    string
	}{
		{k, "task-42/create-ticket", 1, "ik1.RvMuxD0NSLUlme4y3ZCKT58YNCgWAlImYV6A9_BaIng"},
		{k, "task-42/create-ticket", 2, "ik1.QyhsDBwPzUJ852NRoYOeqJFtUllm1I4QhhBVjTqBer4"},
		{anon, "task-42/create-ticket", 1, "ik1.SLmApNrS1clOGzLIEwTdl-xD1iVyLNXEEETKGMaP6TQ"},
		{k, "tâche-42/créer", 1, "ik1.pDbzsVJ8QC6JhrHV0-Ng_NQY0s7PYnz4_Q8i1mgYY60"},
	} {
		if got := c.keys.Key(c.intent, c.version); got != c.want {
			t.Errorf("Key(%q, %d) = %s, want %s", c.intent, c.version, got, c.want)
		}
	}
	if _, err := NewKeys([]byte("short"), ""); !errors.Is(err, ErrWeakSecret) {
		t.Errorf("a 5-byte secret: %v", err)
	}
	if _, err := NewKeys([]byte(testSecret), "bad\nname"); err == nil {
		t.Error("an agent name with a newline was taken")
	}
	if s := k.String(); strings.Contains(s, testSecret) {
		t.Errorf("the keys print their secret: %s", s)
	}
}

func mustKeys(t *testing.T, secret, agent string) *Keys {
	t.Helper()
	k, err := NewKeys([]byte(secret), agent)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// keyedClient is a client of the real middleware (approvalMiddleware: its
// staging deployments need no approval) whose keys are derived from the
// test secret, on a journal at path.
func keyedClient(t *testing.T, url, path string) *Client {
	t.Helper()
	j, err := OpenJournal(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { j.Close() })
	return &Client{BaseURL: url, Token: "t", Journal: j, Keys: mustKeys(t, testSecret, "bot"),
		HTTP: &http.Client{Transport: &principalHeaders{who: "bot:acme:agent"}, Timeout: 30 * time.Second}}
}

// loseJournal deletes the journal's files, as a new machine or an rm
// would, and opens a new one at the same place.
func loseJournal(t *testing.T, c *Client) *Client {
	t.Helper()
	path := c.Journal.Path()
	c.Journal.Close()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
	return keyedClient(t, c.BaseURL, path)
}

var staging = Action{Intent: "release-8/deploy-web", Method: "POST", Path: "/v1/services/web/deployments",
	Body: []byte(`{"artifact":"web-1.4.3","environment":"staging"}`)}

// A journal lost between two calls of one intent: the second call derives
// the same key, and the gateway replays the first one's answer. One effect.
func TestLostJournalReplays(t *testing.T) {
	url, effects := approvalMiddleware(t)
	c := keyedClient(t, url, filepath.Join(t.TempDir(), "journal.db"))
	ctx := context.Background()
	first, err := c.Do(ctx, staging)
	if err != nil || first.Kind != Created || effects.Load() != 1 {
		t.Fatalf("first: %+v %v", first, err)
	}
	c = loseJournal(t, c)
	again, err := c.Do(ctx, staging)
	if err != nil || again.Kind != Replayed || again.Key != first.Key || again.OperationID != first.OperationID {
		t.Fatalf("after the journal was lost: %+v %v", again, err)
	}
	if n := effects.Load(); n != 1 {
		t.Fatalf("%d effects, want 1", n)
	}
	// A repeat is an intent of its own ("#2"), whose key is derived too.
	staging2 := staging
	staging2.Mode = Repeat
	rep, err := c.Do(ctx, staging2)
	if err != nil || rep.Kind != Created || rep.Intent != staging.Intent+"#2" || effects.Load() != 2 {
		t.Fatalf("repeat: %+v %v", rep, err)
	}
	c = loseJournal(t, c)
	staging2.Intent, staging2.Mode = rep.Intent, Resume
	if again, err = c.Do(ctx, staging2); err != nil || again.Kind != Replayed || effects.Load() != 2 {
		t.Fatalf("the repeat after the journal was lost: %+v %v", again, err)
	}
}

// A workflow whose journal is lost resumes each step under its own
// derived key: the steps done are replayed, none performed twice.
func TestLostJournalWorkflowReplays(t *testing.T) {
	url, effects := approvalMiddleware(t)
	c := keyedClient(t, url, filepath.Join(t.TempDir(), "journal.db"))
	w := Workflow{Intent: "release-9", Steps: []Step{
		{Name: "web", Method: "POST", Path: "/v1/services/web/deployments", Body: []byte(`{"artifact":"web-2","environment":"staging"}`)},
		{Name: "api", Method: "POST", Path: "/v1/services/api/deployments", Body: []byte(`{"artifact":"api-2","environment":"staging"}`)},
	}}
	ctx := context.Background()
	if out, err := c.RunWorkflow(ctx, w); err != nil || !out.Done || effects.Load() != 2 {
		t.Fatalf("first run: %+v %v", out, err)
	}
	c = loseJournal(t, c)
	out, err := c.RunWorkflow(ctx, w)
	if err != nil || !out.Done || effects.Load() != 2 {
		t.Fatalf("after the journal was lost: %+v %v, %d effects", out, err, effects.Load())
	}
	for _, s := range out.Steps {
		if s.Outcome.Kind != Replayed {
			t.Errorf("step %s: %+v", s.Name, s.Outcome)
		}
	}
}

// A journal made before keys were derived keeps its random keys: an
// intent it holds resumes under the key it was sent with.
func TestJournalsFromBeforeKeepTheirKeys(t *testing.T) {
	url, effects := approvalMiddleware(t)
	c := keyedClient(t, url, filepath.Join(t.TempDir(), "journal.db"))
	c.Keys = nil // as the client was
	ctx := context.Background()
	first, err := c.Do(ctx, staging)
	if err != nil || first.Kind != Created || len(first.Key) != 22 {
		t.Fatalf("first: %+v %v", first, err)
	}
	c.Keys = mustKeys(t, testSecret, "bot")
	again, err := c.Do(ctx, staging)
	if err != nil || again.Kind != Replayed || again.Key != first.Key || effects.Load() != 1 {
		t.Fatalf("resumed with keys: %+v %v", again, err)
	}
}

// With RefuseDuplicates, a new intent (or a revise, or a repeat of
// another family) whose request is that of an intent that may still take
// effect is refused, naming it, before anything is written or sent.
func TestRefuseDuplicates(t *testing.T) {
	s := &script{answers: []http.HandlerFunc{lost, status(201)}, lookup: lookupSays("unknown")}
	client, _ := newScripted(t, s)
	client.RefuseDuplicates = true
	ctx := context.Background()
	charge := Action{Intent: "charge-1", Method: "POST", Path: "/v1/charges", Body: []byte(`{"amount":4999}`)}
	if out, err := client.Do(ctx, charge); err != nil || out.Kind != Unknown {
		t.Fatalf("the charge: %+v %v", out, err)
	}
	other := Action{Intent: "ticket-1", Method: "POST", Path: "/v1/tickets", Body: []byte(`{"title":"x"}`)}
	if _, err := client.Do(ctx, other); err != nil {
		t.Fatal(err)
	}
	sends := s.count()
	var dup *DuplicateError
	for name, a := range map[string]Action{
		"a new intent": {Intent: "charge-2", Method: "POST", Path: "/v1/charges", Body: []byte(`{ "amount": 4999 }`)},
		"a revise":     {Intent: "ticket-1", Method: "POST", Path: "/v1/charges", Body: []byte(`{"amount":4999}`), Mode: Revise},
	} {
		if _, err := client.Do(ctx, a); !errors.As(err, &dup) || dup.Open.Intent != "charge-1" ||
			!strings.Contains(err.Error(), `intent "charge-1" is unknown`) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := client.Journal.Latest(ctx, "charge-2"); !errors.Is(err, ErrNoIntent) || s.count() != sends {
		t.Fatalf("a refused intent was journaled (%v) or sent (%d sends)", err, s.count()-sends)
	}
	client.RefuseDuplicates = false
	if out, err := client.Do(ctx, Action{Intent: "charge-2", Method: "POST", Path: "/v1/charges",
		Body: []byte(`{"amount":4999}`)}); err != nil || out.Kind != Created {
		t.Fatalf("without the option: %+v %v", out, err)
	}
}
