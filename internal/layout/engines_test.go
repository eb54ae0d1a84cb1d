package layout

import (
	"os/exec"
	"strings"
	"testing"
)

// engines are the module paths of the workflow engines integrations/
// wires idemgate into: each integration is a module of its own, so that a
// user of the main module links none of them.
var engines = []string{"go.temporal.io/", "github.com/dbos-inc/"}

// TestLinksNoWorkflowEngine: nothing the main module builds, its tests
// included, depends on a workflow engine's SDK.
func TestLinksNoWorkflowEngine(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-test", "./...")
	cmd.Dir = moduleRoot(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, stderr(err))
	}
	if n := strings.Count(string(out), "\n"); n < 100 {
		t.Fatalf("go list -deps listed %d packages: the list was read wrong", n)
	}
	for line := range strings.Lines(string(out)) {
		for _, e := range engines {
			if strings.HasPrefix(line, e) {
				t.Errorf("the main module links %s: it belongs in integrations/", strings.TrimSpace(line))
			}
		}
	}
}
