package policy

import (
	"strings"
	"testing"

	"github.com/capstanhq/capstan"
)

// A task writes only onto branches it created with its prefix, as the
// ledger records them (Task.CreatedBranches), or that --allow-branch names
// (Task.AllowBranches): an existing release branch, gh-pages or a
// colleague's branch is refused by default/own-branch, whatever its name —
// under the prefix too — while a pull request from such a head is no write
// onto it.
func TestWritesOnlyOntoBranchesTheTaskCreated(t *testing.T) {
	t.Parallel()
	created := task
	created.CreatedBranches = []Branch{{Repository: "Acme/Payments", Name: "capstan/fix"}, {Repository: "acme/docs", Name: "capstan/docs"}}
	allowed := created
	allowed.AllowBranches = []string{"gh-pages"}
	pr := func(head string) Call {
		return Call{Tool: "github_create_pull_request", Class: capstan.ClassConditional, Repository: "acme/payments", Branch: head, Into: "main", Writes: true}
	}
	for _, tc := range []struct {
		name   string
		call   Call
		task   Task
		effect Effect
		rule   string
		reason []string
	}{
		{"a release branch", putFile("acme/payments", "release/v2", "VERSION"), created, Deny, RuleOwnBranch,
			[]string{"release/v2 is not a branch this task created (github_create_branch, starting with capstan/)", "create one and write there"}},
		{"gh-pages", putFile("acme/payments", "gh-pages", "index.html"), created, Deny, RuleOwnBranch, nil},
		{"a colleague's branch under the prefix", putFile("acme/payments", "capstan/someone-else", "a.md"), created, Deny, RuleOwnBranch, nil},
		{"refs/heads/ of a branch not created", putFile("acme/payments", "refs/heads/release/v2", "VERSION"), created, Deny, RuleOwnBranch, nil},
		{"a branch created in another of the task's repositories", putFile("acme/payments", "capstan/docs", "a.md"),
			Task{Repositories: []string{"acme/payments", "acme/docs"}, Base: "main", CreatedBranches: created.CreatedBranches}, Deny, RuleOwnBranch, nil},
		{"no branch created yet", putFile("acme/payments", "capstan/fix", "a.md"), task, Deny, RuleOwnBranch, nil},
		{"a branch it created", putFile("acme/payments", "capstan/fix", "a.md"), created, Allow, RuleAllow,
			[]string{"onto branches it created starting with capstan/"}},
		{"a branch it created, refs/heads/ and another case of the repository", putFile("ACME/payments", "refs/heads/capstan/fix", "a.md"),
			created, Allow, RuleAllow, nil},
		{"a branch --allow-branch names", putFile("acme/payments", "gh-pages", "index.html"), allowed, Allow, RuleAllow,
			[]string{"or that --allow-branch names (gh-pages)"}},
		{"--allow-branch does not open the base", putFile("acme/payments", "main", "a.md"),
			Task{Repositories: []string{"acme/payments"}, Base: "main", AllowBranches: []string{"main"}}, Deny, RuleBaseBranch, nil},
		{"a pull request from a branch it did not create", pr("release/v2"), created, Allow, RuleAllow, nil},
		{"creating a branch", createBranch("acme/payments", "capstan/new"), task, Allow, RuleAllow, nil},
		{"a read of a branch it did not create", Call{Tool: "github_get_file", Class: capstan.ClassReadOnly, Repository: "acme/payments",
			Branch: "release/v2", Path: "VERSION"}, task, Allow, RuleRead, nil},
		{"a comment", Call{Tool: "github_comment", Class: capstan.ClassUnsafe, Repository: "acme/payments", Writes: true}, task, Allow, RuleAllow, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Builtin().Decide(tc.call, tc.task)
			if d.Effect != tc.effect || d.Rule != tc.rule {
				t.Fatalf("decision %s, want %s by %s", d, tc.effect, tc.rule)
			}
			for _, want := range tc.reason {
				if !strings.Contains(d.Reason, want) {
					t.Errorf("reason %q does not say %q", d.Reason, want)
				}
			}
		})
	}
}

// What runs with the repository's secrets is refused by
// default/workflow-files: anything under .github/, and the root action.yml
// or action.yaml, the path cleaned and compared without case. An
// action.yml elsewhere is an ordinary file.
func TestFilesThatRunWithSecretsAreRefused(t *testing.T) {
	t.Parallel()
	own := task
	own.CreatedBranches = []Branch{{Repository: "acme/payments", Name: "capstan/x"}}
	for _, tc := range []struct {
		path string
		rule string
	}{
		{".github/workflows/ci.yml", RuleWorkflowFiles},
		{".github/CODEOWNERS", RuleWorkflowFiles},
		{".github/dependabot.yml", RuleWorkflowFiles},
		{".GitHub/actions/setup/action.yml", RuleWorkflowFiles},
		{"docs/../.github/settings.yml", RuleWorkflowFiles},
		{".github", RuleWorkflowFiles},
		{"action.yml", RuleWorkflowFiles},
		{"./Action.YAML", RuleWorkflowFiles},
		{"/action.yaml", RuleWorkflowFiles},
		{"tools/action.yml", RuleAllow},
		{".githubx/a.md", RuleAllow},
		{"action.yml.bak", RuleAllow},
	} {
		d := Builtin().Decide(putFile("acme/payments", "capstan/x", tc.path), own)
		if d.Rule != tc.rule {
			t.Errorf("%s: %s, want decided by %s", tc.path, d, tc.rule)
		}
	}
}
