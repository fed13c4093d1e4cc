package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestWorkerLinksNoSandbox: the production worker binary does not contain
// the offline fakes; the demo and the tests point it at the sandbox
// program over HTTP instead (docs/design.md, the sandbox).
func TestWorkerLinksNoSandbox(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps .: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 2 || !strings.Contains(string(out), "github.com/capstanhq/capstan/internal/workerapp") {
		t.Fatalf("go list -deps printed no worker dependencies: %q", out)
	}
	for _, dep := range deps {
		if dep == "github.com/capstanhq/capstan/internal/sandbox" || strings.HasPrefix(dep, "github.com/capstanhq/capstan/internal/sandbox/") {
			t.Errorf("the worker links %s", dep)
		}
	}
}
