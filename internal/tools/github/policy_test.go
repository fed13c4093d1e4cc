package github_test

import (
	"testing"

	"github.com/capstanhq/capstan/internal/policy"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// TestPolicyKnowsTheBuiltinTools: policy.BuiltinTools, which the policy
// (and `starter policy explain`) reads without linking the tools, names
// every built-in GitHub tool with its class, and no other tool.
func TestPolicyKnowsTheBuiltinTools(t *testing.T) {
	t.Parallel()
	all := githubtools.Tools(nil)
	for _, tool := range all {
		b, ok := policy.BuiltinTools[tool.Name()]
		switch {
		case !ok:
			t.Errorf("policy.BuiltinTools lacks %s", tool.Name())
		case b.Class != tool.Class():
			t.Errorf("policy.BuiltinTools says %s is %s; the tool says %s", tool.Name(), b.Class, tool.Class())
		case b.CreatesBranch != (tool.Name() == githubtools.NameCreateBranch):
			t.Errorf("policy.BuiltinTools says %s creates a branch: %v", tool.Name(), b.CreatesBranch)
		}
	}
	if len(policy.BuiltinTools) != len(all) {
		t.Errorf("policy.BuiltinTools has %d tools; there are %d", len(policy.BuiltinTools), len(all))
	}
}
