package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// loseJournal deletes a journal's files, as a new machine or an rm would.
func loseJournal(t *testing.T, path string) {
	t.Helper()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Remove(path + suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}

// callTicket runs idemgate call for the intent, in the fixture's
// environment and env, and decodes what it printed.
func (f *agentFixture) callTicket(t *testing.T, intent string, env ...string) (result, map[string]any) {
	t.Helper()
	r := runEnv(t, append(append([]string{}, f.env...), env...), "", "call", "--intent", intent, "POST",
		"/v1/tickets", "-d", `{"title":"Disk full"}`)
	var out map[string]any
	json.Unmarshal([]byte(r.stdout), &out)
	return r, out
}

// A journal lost between two calls of one intent: the second call derives
// the same key from the agent's secret, and the gateway replays the first
// one's answer. One effect. With no secret configured, one is made in the
// configuration directory on first use (0600), and serves the same way;
// a secret file named but missing, or a secret too short, is refused
// before anything is sent.
func TestCallLostJournalReplays(t *testing.T) {
	t.Parallel()
	f := newAgentFixture(t)
	r, first := f.callTicket(t, "task-42/create-ticket")
	if r.code != 0 || first["kind"] != "created" || !strings.HasPrefix(first["key"].(string), "ik1.") {
		t.Fatalf("first: %+v", r)
	}
	loseJournal(t, f.journal)
	r, again := f.callTicket(t, "task-42/create-ticket")
	if r.code != 0 || again["kind"] != "replayed" || again["key"] != first["key"] ||
		again["operation_id"] != first["operation_id"] || f.effects.Load() != 1 {
		t.Fatalf("after the journal was lost: %+v, %d effects", r, f.effects.Load())
	}
	// Another agent (--agent) sharing the secret has keys of its own.
	if r, other := f.callTicket(t, "task-42/create-ticket", "IDEMGATE_AGENT=agent-2",
		"IDEMGATE_JOURNAL="+filepath.Join(t.TempDir(), "j.db")); other["key"] == first["key"] || r.code != 0 {
		t.Fatalf("another agent: %+v", r)
	}

	config := t.TempDir()
	unset := []string{"IDEMGATE_AGENT_SECRET=", "XDG_CONFIG_HOME=" + config}
	if r, first = f.callTicket(t, "task-43", unset...); r.code != 0 || first["kind"] != "created" {
		t.Fatalf("no secret configured: %+v", r)
	}
	loseJournal(t, f.journal)
	if r, again = f.callTicket(t, "task-43", unset...); again["kind"] != "replayed" || f.effects.Load() != 3 {
		t.Fatalf("no secret configured, after the journal was lost: %+v, %d effects", r, f.effects.Load())
	}
	if fi, err := os.Stat(filepath.Join(config, "idemgate", "agent-secret")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the secret made on first use: %v %v", fi, err)
	}

	for name, env := range map[string][]string{
		"missing file": {"IDEMGATE_AGENT_SECRET_FILE=" + filepath.Join(config, "none")},
		"too short":    {"IDEMGATE_AGENT_SECRET=short"},
	} {
		if r, _ := f.callTicket(t, "task-44", env...); r.code != 1 || !strings.Contains(r.stderr, "agent secret") {
			t.Errorf("%s: %+v", name, r)
		}
	}
	if n := f.effects.Load(); n != 3 {
		t.Fatalf("%d effects, want 3", n)
	}
}

// idemgate mcp derives its keys as call does: a journal lost between two
// calls of one intent the tool handed out (a new one, or a repeat's), and
// the second is replayed; a repeat's name typed by hand is still refused.
func TestMCPLostJournalReplays(t *testing.T) {
	t.Parallel()
	f := newAgentFixture(t)
	cs := f.mcp(t)
	write := map[string]any{"method": "POST", "path": "/v1/tickets", "body": map[string]any{"title": "Disk full"}}
	intent := handOut(t, cs, write)
	if r := callTool(t, cs, "submit_write", withIntent(write, intent)); r.out["kind"] != "created" {
		t.Fatalf("first: %+v", r)
	}
	repeat := withIntent(write, intent)
	repeat["mode"] = "repeat"
	rep := callTool(t, cs, "submit_write", repeat)
	second, _ := rep.out["intent"].(string)
	if rep.out["kind"] != "created" || second == intent || f.effects.Load() != 2 {
		t.Fatalf("repeat: %+v", rep)
	}
	cs.Close()
	loseJournal(t, f.journal)
	cs = f.mcp(t)
	for _, name := range []string{intent, second} { // what the tool handed out still verifies, and replays
		if r := callTool(t, cs, "submit_write", withIntent(write, name)); r.isError || r.out["kind"] != "replayed" {
			t.Fatalf("%s after the journal was lost: %+v", name, r)
		}
	}
	base, _, _ := strings.Cut(intent, "~")
	f.refused(t, cs, withIntent(write, base+"#3"), "never handed out", 2) // a repeat typed by hand
	if n := f.effects.Load(); n != 2 {
		t.Fatalf("%d effects, want 2", n)
	}
}
