package workflows_test

import (
	"testing"

	"github.com/capstanhq/capstan/internal/workflows"
)

// The chain scope depends on the namespace and the first run id alone, and
// the ids of the workflow tests carry the one of the SDK's test
// environment (namespace "default-test-namespace", no first run id).
func TestChainScope(t *testing.T) {
	if got := workflows.ChainScope("default-test-namespace", ""); got != "~3c4e2731fc30" {
		t.Fatalf("ChainScope of the test environment = %s, want ~3c4e2731fc30 (the ids the workflow tests expect)", got)
	}
	a, b := workflows.ChainScope("default", "run-1"), workflows.ChainScope("other", "run-1")
	if a == b || a == workflows.ChainScope("default", "run-2") {
		t.Fatalf("ChainScope does not tell namespaces or chains apart: %s, %s", a, b)
	}
	for in, want := range map[string]string{
		"~3c4e2731fc30:t4:github_comment:1": "t4:github_comment:1",
		"~3c4e2731fc30/t1/a2":               "t1/a2",
		"t1/a2":                             "t1/a2",
		"github_create_branch:acme/x:feat":  "github_create_branch:acme/x:feat",
		"~3c4e2731fc3:t1":                   "~3c4e2731fc3:t1",
	} {
		if got := workflows.WithoutScope(in); got != want {
			t.Errorf("WithoutScope(%q) = %q, want %q", in, got, want)
		}
	}
}
