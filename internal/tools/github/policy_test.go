package github_test

import (
	"encoding/json"
	"testing"

	"github.com/capstanhq/capstan/internal/policy"
	"github.com/capstanhq/capstan/internal/tools"
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

// TestToolsNameTheirTarget: every built-in GitHub tool says what a call
// acts on, from its own typed arguments, as policy.BuiltinTools documents
// — the fields the task's policy decides on.
func TestToolsNameTheirTarget(t *testing.T) {
	t.Parallel()
	args := map[string]string{
		githubtools.NameGetFile:           `{"repo":"Acme/App","path":"a/b.go","ref":"dev"}`,
		githubtools.NameListPullRequests:  `{"repo":"acme/app","head":"x","base":"main"}`,
		githubtools.NameCreateBranch:      `{"repo":"acme/app","branch":"capstan/x","from":"main"}`,
		githubtools.NamePutFile:           `{"repo":"acme/app","branch":"capstan/x","path":".github/workflows/ci.yml","content":"c","message":"m"}`,
		githubtools.NameCreatePullRequest: `{"repo":"acme/app","head":"capstan/x","base":"main","title":"t","body":"b"}`,
		githubtools.NameComment:           `{"repo":"acme/app","number":3,"body":"b"}`,
	}
	want := map[string]tools.Target{
		githubtools.NameGetFile:           {Repository: "Acme/App", Branch: "dev", Path: "a/b.go"},
		githubtools.NameListPullRequests:  {Repository: "acme/app"},
		githubtools.NameCreateBranch:      {Repository: "acme/app", Branch: "capstan/x", From: "main", CreatesBranch: true},
		githubtools.NamePutFile:           {Repository: "acme/app", Branch: "capstan/x", Path: ".github/workflows/ci.yml"},
		githubtools.NameCreatePullRequest: {Repository: "acme/app", Branch: "capstan/x", Into: "main"},
		githubtools.NameComment:           {Repository: "acme/app"},
	}
	for _, tool := range githubtools.Tools(nil) {
		tg, ok := tool.(tools.Targeted)
		if !ok {
			t.Errorf("%s is not tools.Targeted", tool.Name())
			continue
		}
		got, err := tg.Target(json.RawMessage(args[tool.Name()]))
		if err != nil || got != want[tool.Name()] {
			t.Errorf("%s: Target = %+v, %v; want %+v", tool.Name(), got, err, want[tool.Name()])
		}
		if _, err := tg.Target(json.RawMessage(`{"repo":"not a repo"}`)); err == nil {
			t.Errorf("%s: Target accepted bad arguments", tool.Name())
		}
	}
}
