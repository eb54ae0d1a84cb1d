package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// The README's commands, run from the repository's root, leave the
// gateway's store (examples/gateway.yaml's) and the ops API's default
// file there, with SQLite's WAL files: git ignores every one of them, so
// that trying idemgate never leaves a newcomer's clone dirty.
func TestExampleFilesAreIgnored(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	// Its store as the file says it, without the credentials it reads
	// from the environment: setting them here would set them for every
	// test in this process.
	text, err := os.ReadFile(filepath.Join(root, "examples", "gateway.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Store string `yaml:"store"`
	}
	if err := yaml.Unmarshal(text, &cfg); err != nil {
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
