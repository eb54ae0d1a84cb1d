package agent

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
	"time"
)

// refusedURL is an address on which nothing listens: a connection to it is
// refused before anything is written.
func refusedURL(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

// An intent whose every attempt was refused before it was written never
// reached the gateway: long after, "the gateway holds nothing" means
// exactly that, and it is sent, not declared unknown.
func TestNeverSentIsSentAfterRetention(t *testing.T) {
	s := &script{answers: []http.HandlerFunc{status(201)}, lookup: lookupSays("")}
	client, _ := newScripted(t, s)
	up, ctx := client.BaseURL, context.Background()
	client.BaseURL, client.Policy = refusedURL(t), Policy{MaxAttempts: 2, GatewayRetention: time.Millisecond}
	a := Action{Intent: "down", Method: "POST", Path: "/v1/x"}
	if out, err := client.Do(ctx, a); err != nil || out.Kind != Failed {
		t.Fatalf("gateway down: %+v %v", out, err)
	}
	if e, _ := client.Journal.Latest(ctx, "down"); e.Sent != SentNo || e.Attempts != 2 {
		t.Fatalf("journal: %+v", e)
	}
	time.Sleep(5 * time.Millisecond) // past the retention
	client.BaseURL = up
	out, err := client.Do(ctx, a)
	if err != nil || out.Kind != Created || s.count() != 1 {
		t.Fatalf("gateway back: %+v %v, %d sends", out, err, s.count())
	}
	if e, _ := client.Journal.Latest(ctx, "down"); e.Sent != SentYes {
		t.Fatalf("journal after the send: %+v", e)
	}
}

// A process that died after sending leaves an attempt that may have been
// sent; the gateway's word settles it (it holds nothing under the key, or
// holds the operation released), so a resend the gateway turns away for
// now leaves the intent failed (and free to be repeated), not unknown
// forever, and the outcome says what the journal says.
func TestGatewaysWordSettlesACrash(t *testing.T) {
	for _, state := range []string{"", "prepared"} {
		s := &script{answers: []http.HandlerFunc{problemAnswer(503, "store_unavailable")}, lookup: lookupSays(state)}
		client, _ := newScripted(t, s)
		client.Policy = Policy{MaxAttempts: 1}
		ctx := context.Background()
		a := Action{Intent: "crashed", Method: "POST", Path: "/v1/x"}
		e, _, _ := client.Prepare(ctx, a)
		client.Journal.beginAttempt(ctx, e.Key) // sent; then the process died
		if e, _ := client.Journal.Latest(ctx, "crashed"); e.Sent != SentMaybe {
			t.Fatalf("after the crash: %+v", e)
		}
		out, err := client.Do(ctx, a)
		last, _ := client.Journal.Latest(ctx, "crashed")
		if err != nil || out.Kind != Failed || s.count() != 1 || last.LastKind != Failed || last.Sent != SentYes {
			t.Fatalf("gateway holds %q: outcome %+v %v, %d sends, journal %+v", state, out, err, s.count(), last)
		}
		a.Mode = Repeat
		if _, err := client.Do(ctx, a); err != nil {
			t.Fatalf("repeat of a settled intent: %v", err)
		}
	}
}

// A journal made before attempts recorded their delivery opens, and its
// attempts count as sent when answered, maybe otherwise.
func TestJournalFromBeforeSentColumn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Format(timeFormat)
	for _, q := range []string{fmt.Sprintf(`PRAGMA application_id = %d`, applicationID),
		`CREATE TABLE intents (name TEXT NOT NULL, version INTEGER NOT NULL, key TEXT NOT NULL UNIQUE,
			method TEXT NOT NULL, path TEXT NOT NULL, fingerprint TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
			last_kind TEXT NOT NULL DEFAULT '', last_status INTEGER NOT NULL DEFAULT 0,
			operation_id TEXT NOT NULL DEFAULT '', created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
			PRIMARY KEY (name, version))`,
		`CREATE TABLE attempts (key TEXT NOT NULL, n INTEGER NOT NULL, started_at TEXT NOT NULL,
			kind TEXT NOT NULL DEFAULT '', status INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (key, n))`,
		`INSERT INTO intents VALUES ('answered', 1, 'k1', 'POST', '/x', 'f1', 1, 'rejected', 422, '', '` + now + `', '` + now + `')`,
		`INSERT INTO attempts VALUES ('k1', 1, '` + now + `', 'rejected', 422)`,
		`INSERT INTO intents VALUES ('lost', 1, 'k2', 'POST', '/x', 'f2', 1, 'failed', 0, '', '` + now + `', '` + now + `')`,
		`INSERT INTO attempts VALUES ('k2', 1, '` + now + `', 'failed', 0)`,
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	j, err := OpenJournal(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for name, want := range map[string]Sent{"answered": SentYes, "lost": SentMaybe} {
		if e, err := j.Latest(context.Background(), name); err != nil || e.Sent != want {
			t.Errorf("%s: %+v %v, want sent %s", name, e, err, want)
		}
	}
}
