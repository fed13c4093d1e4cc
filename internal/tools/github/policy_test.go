package github_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/capstanhq/capstan/internal/policy"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// TestPolicyKnowsTheBuiltinTools: policy.BuiltinTools, which the policy
// (and `starter policy explain`) reads without linking the tools, names
// every built-in GitHub tool with its class, and no other tool.
func TestPolicyKnowsTheBuiltinTools(t *testing.T) {
	t.Parallel()
	all := githubtools.Tools(nil)
	for _, impl := range all {
		b, ok := policy.BuiltinTools[impl.Name()]
		switch {
		case !ok:
			t.Errorf("policy.BuiltinTools lacks %s", impl.Name())
		case b.Class != impl.Class():
			t.Errorf("policy.BuiltinTools says %s is %s; the tool says %s", impl.Name(), b.Class, impl.Class())
		case b.CreatesBranch != (impl.Name() == githubtools.NameCreateBranch):
			t.Errorf("policy.BuiltinTools says %s creates a branch: %v", impl.Name(), b.CreatesBranch)
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
	want := map[string]tool.Target{
		githubtools.NameGetFile:           {Repository: "Acme/App", Branch: "dev", Path: "a/b.go"},
		githubtools.NameListPullRequests:  {Repository: "acme/app"},
		githubtools.NameCreateBranch:      {Repository: "acme/app", Branch: "capstan/x", From: "main", CreatesBranch: true},
		githubtools.NamePutFile:           {Repository: "acme/app", Branch: "capstan/x", Path: ".github/workflows/ci.yml"},
		githubtools.NameCreatePullRequest: {Repository: "acme/app", Branch: "capstan/x", Into: "main"},
		githubtools.NameComment:           {Repository: "acme/app"},
	}
	for _, impl := range githubtools.Tools(nil) {
		tg, ok := impl.(tool.Targeted)
		if !ok {
			t.Errorf("%s is not tool.Targeted", impl.Name())
			continue
		}
		got, err := tg.Target(json.RawMessage(args[impl.Name()]))
		if err != nil || !reflect.DeepEqual(got, want[impl.Name()]) {
			t.Errorf("%s: Target = %+v, %v; want %+v", impl.Name(), got, err, want[impl.Name()])
		}
		if _, err := tg.Target(json.RawMessage(`{"repo":"not a repo"}`)); err == nil {
			t.Errorf("%s: Target accepted bad arguments", impl.Name())
		}
	}
}
