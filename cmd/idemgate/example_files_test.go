package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemgate/idemgate/config"
)

// The README's commands, run from the repository's root, leave the
// gateway's store (examples/gateway.yaml's) and the ops API's default
// file there, with SQLite's WAL files: git ignores every one of them, so
// that trying idemgate never leaves a newcomer's clone dirty.
func TestExampleFilesAreIgnored(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("OPS_API_TOKEN", "x")
	t.Setenv("STRIPE_WEBHOOK_SECRET", "whsec_x")
	cfg, err := config.Load(filepath.Join(root, "examples", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	store, ok := strings.CutPrefix(cfg.Store, "sqlite:")
	if !ok {
		t.Fatalf("the example's store is %q, not a SQLite file", cfg.Store)
	}
	opsDB := newOpsAPICmd().Flags().Lookup("db").DefValue
	for _, base := range []string{filepath.Clean(store), opsDB} {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			cmd := exec.Command("git", "check-ignore", "-q", "--no-index", base+suffix)
			cmd.Dir, cmd.Env = root, os.Environ()
			if err := cmd.Run(); err != nil {
				t.Errorf("%s, left in the root by the README's commands, is not ignored by git (%v)", base+suffix, err)
			}
		}
	}
}
