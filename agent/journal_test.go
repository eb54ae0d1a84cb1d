package agent

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestIntentsKeepTheirKey(t *testing.T) {
	s := &script{answers: []http.HandlerFunc{status(201)}}
	client, _ := newScripted(t, s)
	ctx := context.Background()
	a := Action{Intent: "task-42/create-ticket", Method: "post", Path: "/v1/tickets", Body: []byte(`{"a":1,"b":[true]}`)}
	first, err := client.Do(ctx, a)
	if err != nil || first.Kind != Created || len(first.Key) != 22 {
		t.Fatalf("%+v %v", first, err)
	}

	// The same intent from a new process: the journal reopened.
	path := client.Journal.Path()
	client.Journal.Close()
	if client.Journal, err = OpenJournal(ctx, path); err != nil {
		t.Fatal(err)
	}
	a.Body = []byte("{ \"b\": [true], \"a\": 1.0 }") // the same JSON, written otherwise
	again, err := client.Do(ctx, a)
	if err != nil || again.Key != first.Key || again.Version != 1 {
		t.Fatalf("resume: %+v %v", again, err)
	}

	// A changed payload on resume: a local error, and nothing sent.
	sent := s.count()
	a.Body = []byte(`{"a":2,"b":[true]}`)
	if _, err := client.Do(ctx, a); !errors.Is(err, ErrPayloadChanged) || !strings.Contains(err.Error(), "revise") {
		t.Fatalf("changed payload: %v", err)
	}
	if s.count() != sent {
		t.Fatal("a changed payload was sent")
	}

	// Revise: a new version with a new key; resume then means that version.
	a.Mode = Revise
	revised, err := client.Do(ctx, a)
	if err != nil || revised.Version != 2 || revised.Key == first.Key || revised.Intent != a.Intent {
		t.Fatalf("revise: %+v %v", revised, err)
	}
	if _, err := client.Do(ctx, a); !errors.Is(err, ErrInvalidAction) {
		t.Fatalf("a revise that changes nothing: %v", err)
	}
	a.Mode = Resume
	if r, _ := client.Do(ctx, a); r.Key != revised.Key {
		t.Fatalf("resume after revise: %+v", r)
	}

	// Repeat: a new intent, a new key, the same request.
	a.Mode = Repeat
	rep, err := client.Do(ctx, a)
	if err != nil || rep.Intent != "task-42/create-ticket#2" || rep.Key == revised.Key {
		t.Fatalf("repeat: %+v %v", rep, err)
	}
	if rep2, _ := client.Do(ctx, a); rep2.Intent != "task-42/create-ticket#3" {
		t.Fatalf("second repeat: %+v", rep2)
	}
	a.Body = []byte(`{"a":3}`)
	if _, err := client.Do(ctx, a); !errors.Is(err, ErrPayloadChanged) {
		t.Fatalf("a repeat with another payload: %v", err)
	}
}

func TestBadActionsAreRefusedLocally(t *testing.T) {
	s := &script{answers: []http.HandlerFunc{status(201)}}
	client, _ := newScripted(t, s)
	for name, a := range map[string]Action{
		"no intent":     {Method: "POST", Path: "/v1/x"},
		"no path":       {Intent: "i", Method: "POST", Path: "v1/x"},
		"not JSON":      {Intent: "i", Method: "POST", Path: "/v1/x", Body: []byte(`{"a":`)},
		"duplicate key": {Intent: "i", Method: "POST", Path: "/v1/x", Body: []byte(`{"a":1,"a":2}`)},
		"bad mode":      {Intent: "i", Method: "POST", Path: "/v1/x", Mode: "again"},
	} {
		if _, err := client.Do(context.Background(), a); !errors.Is(err, ErrInvalidAction) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if s.count() != 0 {
		t.Fatalf("%d bad actions were sent", s.count())
	}
}

func TestJournalSharedByConnections(t *testing.T) {
	path := filepath.Join(t.TempDir(), "shared.db")
	ctx := context.Background()
	var journals []*Journal
	for range 4 {
		j, err := OpenJournal(ctx, path)
		if err != nil {
			t.Fatal(err)
		}
		defer j.Close()
		journals = append(journals, j)
	}
	want := Entry{Intent: "same", Version: 1, Method: "POST", Path: "/x", Fingerprint: "sha256:aa"}
	keys := make([]string, 16)
	repeats := make([]string, 16)
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e, err := journals[i%4].create(ctx, want, nil)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = e.Key
			r, err := journals[i%4].createRepeat(ctx, want, nil)
			if err != nil {
				t.Error(err)
				return
			}
			repeats[i] = r.Intent
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for i := range keys {
		if keys[i] != keys[0] {
			t.Fatalf("one intent got two keys: %v", keys)
		}
		if seen[repeats[i]] {
			t.Fatalf("two repeats got one intent: %v", repeats)
		}
		seen[repeats[i]] = true
	}
}

func TestJournalRefusesOtherFiles(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	os.WriteFile(garbage, []byte(strings.Repeat("not a database ", 500)), 0o600)
	if _, err := OpenJournal(context.Background(), garbage); err == nil || !strings.Contains(err.Error(), garbage) {
		t.Fatalf("corrupt file: %v", err)
	}
	foreign := filepath.Join(dir, "foreign.db")
	db, _ := sql.Open("sqlite", foreign)
	db.Exec(`CREATE TABLE customers (id INTEGER)`)
	db.Close()
	_, err := OpenJournal(context.Background(), foreign)
	if err == nil || !strings.Contains(err.Error(), foreign) || !strings.Contains(err.Error(), "not an idemgate journal") {
		t.Fatalf("another program's database: %v", err)
	}
}

// Pending lists what is not final, and the failures the gateway never
// answered (a resume may still perform them), not those it did.
func TestPendingListsWhatIsNotFinal(t *testing.T) {
	client, _ := newScripted(t, &script{answers: []http.HandlerFunc{problemAnswer(409, "outcome_unknown"),
		problemAnswer(403, "approval_denied"), problemAnswer(503, "store_unavailable")}})
	client.Policy = Policy{MaxAttempts: 1}
	ctx := context.Background()
	for _, intent := range []string{"lost", "denied", "busy"} {
		client.Do(ctx, Action{Intent: intent, Method: "POST", Path: "/v1/x"})
	}
	client.Journal.create(ctx, Entry{Intent: "never-sent", Version: 1, Method: "POST", Path: "/x", Fingerprint: "f"}, nil)
	pending, err := client.Journal.Pending(ctx)
	var names []string
	for _, e := range pending {
		names = append(names, e.Intent)
	}
	if err != nil || strings.Join(names, " ") != "lost busy never-sent" || pending[0].LastKind != Unknown {
		t.Fatalf("%v %v", err, names)
	}
}

// Prepare hands back an unnamed intent for the same request, never a named
// one (another task's), and checks the mode.
func TestPrepareReusesOnlyUnnamedIntents(t *testing.T) {
	s := &script{answers: []http.HandlerFunc{status(201)}}
	client, _ := newScripted(t, s)
	ctx := context.Background()
	a := Action{Method: "POST", Path: "/v1/tickets", Body: []byte(`{"t":1}`)}
	named := a
	named.Intent = "task-42/create"
	client.Do(ctx, named)
	first, existing, err := client.Prepare(ctx, a)
	if err != nil || existing || first.Intent == named.Intent || !strings.HasPrefix(first.Intent, "intent-") {
		t.Fatalf("%+v %t %v", first, existing, err)
	}
	again, existing, _ := client.Prepare(ctx, a)
	if !existing || again.Key != first.Key {
		t.Fatalf("the same unnamed request: %+v %t", again, existing)
	}
	a.Mode = "bogus"
	if _, _, err := client.Prepare(ctx, a); !errors.Is(err, ErrInvalidAction) {
		t.Fatalf("bad mode: %v", err)
	}
}

// TestJournalFromBeforeParamsResumes: an intent journaled before the
// fingerprint covered params and query holds the older fingerprint; its
// resume is the same action, not a changed one.
func TestJournalFromBeforeParamsResumes(t *testing.T) {
	s := &script{answers: []http.HandlerFunc{status(201)}}
	client, _ := newScripted(t, s)
	ctx := context.Background()
	a := Action{Intent: "old", Method: "POST", Path: "/v1/tickets", Body: []byte(`{"a":1}`)}
	first, err := client.Do(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Journal.db.ExecContext(ctx, `UPDATE intents SET fingerprint = ? WHERE name = 'old'`,
		legacyFingerprint(a)); err != nil {
		t.Fatal(err)
	}
	again, err := client.Do(ctx, a)
	if err != nil || again.Key != first.Key {
		t.Fatalf("resume of an intent journaled with the older fingerprint: %+v, %v", again, err)
	}
	a.Body = []byte(`{"a":2}`)
	if _, err := client.Do(ctx, a); !errors.Is(err, ErrPayloadChanged) {
		t.Fatalf("a changed payload against the older fingerprint: %v", err)
	}
}
