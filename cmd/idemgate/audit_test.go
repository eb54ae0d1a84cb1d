package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemgate/idemgate/audit"
)

// TestAuditKeygenAndVerify: keygen writes a key only its owner reads and
// prints the verifier key; verify accepts an export signed with it, and
// names the edited event of a tampered one, exiting 3.
func TestAuditKeygenAndVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "audit.key")
	r := run(t, "", "audit", "keygen", keyFile)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "idemgate+") {
		t.Fatalf("keygen: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if fi, err := os.Stat(keyFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	if r := run(t, "", "audit", "keygen", keyFile); r.code != 1 {
		t.Fatalf("keygen over a key: %d", r.code)
	}
	signer, err := audit.LoadSigner(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	export := filepath.Join(dir, "export.jsonl")
	f, _ := os.Create(export)
	w := audit.NewWriter(f)
	var fr audit.Frontier
	for i := range 30 {
		e := audit.Event{Seq: int64(i), At: time.Date(2026, 12, 3, 10, 0, i, 0, time.UTC), Tenant: "acme",
			Kind: audit.Received, Key: fmt.Sprintf("k-%d", i)}
		if err := w.Event(e); err != nil {
			t.Fatal(err)
		}
		h, _ := e.LeafHash()
		fr.Append(h)
	}
	cp, err := audit.Checkpoint{Origin: audit.Origin("idemgate", "acme"), Size: fr.Size(), Root: fr.Root()}.Sign(signer)
	if err != nil || w.Checkpoint(cp) != nil || w.Flush() != nil || f.Close() != nil {
		t.Fatal(err)
	}
	if r := run(t, "", "audit", "verify", export, "--key", keyFile+".pub"); r.code != 0 ||
		!strings.Contains(r.stdout, "ok: idemgate/acme, 30 events, 1 checkpoints") {
		t.Fatalf("verify: %d %q %q", r.code, r.stdout, r.stderr)
	}
	data, _ := os.ReadFile(export)
	os.WriteFile(export, []byte(strings.Replace(string(data), `"key":"k-7"`, `"key": "k-7"`, 1)), 0o600)
	if r := run(t, "", "audit", "verify", export, "--key", keyFile+".pub"); r.code != 3 ||
		!strings.Contains(r.stderr, "line 8, event 7: not the canonical form") {
		t.Fatalf("tampered: %d %q %q", r.code, r.stdout, r.stderr)
	}
	if r := run(t, "", "audit", "verify", export); r.code != 1 || !strings.Contains(r.stderr, "--key") {
		t.Fatalf("no key: %d %q", r.code, r.stderr)
	}
}
