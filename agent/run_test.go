package agent

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/idemgate/idemgate/contract"
)

// runsSeen records the Idempotency-Run of every lookup, beside the
// script's sends.
type runsSeen struct {
	mu      sync.Mutex
	lookups []string
}

func (s *runsSeen) lookup(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.lookups = append(s.lookups, r.Header.Get(contract.HeaderRun))
		s.mu.Unlock()
		h(w, r)
	}
}

// sentRuns is the Idempotency-Run of every request the script received,
// sends then lookups.
func sentRuns(s *script, seen *runsSeen) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var runs []string
	for _, h := range s.sends {
		runs = append(runs, h.Get(contract.HeaderRun))
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	return append(runs, seen.lookups...)
}

// everyRequestNames checks that every request carried run, and that there
// were at least n of them.
func everyRequestNames(t *testing.T, s *script, seen *runsSeen, run string, n int) {
	t.Helper()
	runs := sentRuns(s, seen)
	if len(runs) < n {
		t.Fatalf("%d requests, want at least %d", len(runs), n)
	}
	for i, got := range runs {
		if got != run {
			t.Fatalf("request %d of %d named run %q, want %q", i+1, len(runs), got, run)
		}
	}
}

// By default every request, retries and lookups included, names the
// journal's process run, which stays the same for every call of the
// client and differs from another journal's.
func TestEveryRequestNamesTheJournalsRun(t *testing.T) {
	seen := &runsSeen{}
	s := &script{answers: []http.HandlerFunc{problemAnswer(503, "store_unavailable"), lost, status(201)},
		lookup: seen.lookup(lookupSays("prepared"))}
	client, _ := newScripted(t, s)
	ctx := context.Background()
	run := client.Journal.Run()
	if !strings.HasPrefix(run, "run_") || len(run) != len("run_")+26 {
		t.Fatalf("the journal's run is %q, want run_ and a ULID", run)
	}
	out, err := client.Do(ctx, Action{Intent: "i", Method: "POST", Path: "/v1/x"})
	if err != nil || out.Kind != Created || out.Attempts != 3 {
		t.Fatalf("%+v %v", out, err)
	}
	if _, err := client.Status(ctx, "i"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Do(ctx, Action{Intent: "j", Method: "POST", Path: "/v1/x"}); err != nil {
		t.Fatal(err)
	}
	everyRequestNames(t, s, seen, run, 6) // 3 sends and a lookup; a status lookup; another send
	if client.Journal.Run() != run {
		t.Fatalf("the journal's run changed: %q, then %q", run, client.Journal.Run())
	}

	// The same file opened again (another process, or a restart) is
	// another run.
	other, err := OpenJournal(ctx, client.Journal.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	third, err := OpenJournal(ctx, filepath.Join(t.TempDir(), "other.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	if other.Run() == run || third.Run() == run || other.Run() == third.Run() {
		t.Fatalf("three journals opened, runs %q, %q, %q", run, other.Run(), third.Run())
	}
}

// A run the caller names is sent as written, on every request.
func TestCallersRunIsSentVerbatim(t *testing.T) {
	seen := &runsSeen{}
	s := &script{answers: []http.HandlerFunc{status(502), status(201)}, lookup: seen.lookup(lookupSays("succeeded"))}
	client, _ := newScripted(t, s)
	client.Run = "workflow-7/conversation: été №3"
	ctx := context.Background()
	if out, err := client.Do(ctx, Action{Intent: "i", Method: "POST", Path: "/v1/x"}); err != nil || out.Kind != Created {
		t.Fatalf("%+v %v", out, err)
	}
	if _, err := client.StatusByOperation(ctx, "op_1"); err != nil {
		t.Fatal(err)
	}
	everyRequestNames(t, s, seen, client.Run, 3)
	client.Run = strings.Repeat("r", contract.MaxRunLen)
	if _, err := client.Do(ctx, Action{Intent: "long", Method: "POST", Path: "/v1/x"}); err != nil {
		t.Fatal(err)
	}
	if got := sentRuns(s, seen)[2]; got != client.Run {
		t.Fatalf("a run of %d bytes arrived as %q", contract.MaxRunLen, got)
	}
}

// A run that could not arrive as written is refused before anything is
// journaled or sent, by every entry point.
func TestBadRunIsRefused(t *testing.T) {
	seen := &runsSeen{}
	s := &script{answers: []http.HandlerFunc{status(201)}, lookup: seen.lookup(lookupSays("succeeded"))}
	client, _ := newScripted(t, s)
	ctx := context.Background()
	a := Action{Intent: "i", Method: "POST", Path: "/v1/x"}
	for name, run := range map[string]string{
		"too long": strings.Repeat("r", contract.MaxRunLen+1), "newline": "run\nX-Admin: 1", "tab": "a\tb",
		"NUL": "a\x00b", "DEL": "a\x7fb", "C1 control": "a\u0085b", "not UTF-8": "a\xffb", "leading space": " a",
		"trailing space": "a ", "zero-width space": "a\u200bb",
	} {
		client.Run = run
		if _, err := client.Do(ctx, a); !errors.Is(err, ErrInvalidRun) {
			t.Errorf("%s: Do: %v", name, err)
		}
		if _, _, err := client.Prepare(ctx, Action{Method: "POST", Path: "/v1/x"}); !errors.Is(err, ErrInvalidRun) {
			t.Errorf("%s: Prepare: %v", name, err)
		}
		if _, err := client.Status(ctx, "i"); !errors.Is(err, ErrInvalidRun) {
			t.Errorf("%s: Status: %v", name, err)
		}
		if _, err := client.StatusByOperation(ctx, "op_1"); !errors.Is(err, ErrInvalidRun) {
			t.Errorf("%s: StatusByOperation: %v", name, err)
		}
		if CheckRun(run) == nil {
			t.Errorf("%s: CheckRun accepts %q", name, run)
		}
	}
	if n := len(sentRuns(s, seen)); n != 0 {
		t.Fatalf("%d requests were sent with a bad run", n)
	}
	if _, err := client.Journal.Latest(ctx, "i"); !errors.Is(err, ErrNoIntent) {
		t.Fatalf("a bad run journaled the intent: %v", err)
	}
	if err := CheckRun(""); !errors.Is(err, ErrInvalidRun) {
		t.Fatalf("CheckRun of no run: %v", err)
	}
}
