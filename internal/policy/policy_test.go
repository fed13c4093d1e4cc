package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/capstanhq/capstan"
)

// task is a task sent to acme/payments with --base main, whose repository's
// default branch is trunk, and which has created capstan/x and
// capstan/fix-typo there (default/own-branch).
var task = created(Task{
	Repositories:  []string{"acme/payments"},
	Base:          "main",
	DefaultBranch: "trunk",
	Tenant:        "default",
})

// created is t having created capstan/x and capstan/fix-typo in each of
// its repositories, so a write onto them passes default/own-branch.
func created(t Task) Task {
	for _, r := range t.Repositories {
		t.CreatedBranches = append(t.CreatedBranches, Branch{Repository: r, Name: "capstan/x"}, Branch{Repository: r, Name: "capstan/fix-typo"})
	}
	return t
}

func putFile(repo, branch, path string) Call {
	return Call{Tool: "github_put_file", Class: capstan.ClassIdempotent, Repository: repo, Branch: branch, Path: path, Writes: true}
}

func createBranch(repo, branch string) Call {
	return Call{Tool: "github_create_branch", Class: capstan.ClassConditional, Repository: repo, Branch: branch, From: "main",
		CreatesBranch: true, Writes: true}
}

// Each default rule refuses with its name and a reason naming what is
// allowed; compliant calls are allowed.
func TestDefaultRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		call   Call
		task   Task
		effect Effect
		rule   string
		reason []string // each must appear in the reason
	}{
		{"another repository", createBranch("acme/other", "capstan/x"), task, Deny, RuleRepository,
			[]string{"acme/other is outside this task's repositories: acme/payments"}},
		{"a read of another repository", Call{Tool: "github_get_file", Class: capstan.ClassReadOnly, Repository: "acme/other", Path: "a"}, task,
			Deny, RuleRepository, []string{"acme/other is outside this task's repositories: acme/payments"}},
		{"a repository allowed by --allow-repo, another case", putFile("ACME/Docs", "capstan/x", "a.md"),
			created(Task{Repositories: []string{"acme/payments", "acme/docs"}, Base: "main"}), Allow, RuleAllow, nil},
		{"a write to the base branch", putFile("acme/payments", "main", "README.md"), task, Deny, RuleBaseBranch,
			[]string{"main is this task's base branch", "write to a branch starting with capstan/", "pull request into main"}},
		{"a write to refs/heads/ of the base branch", putFile("acme/payments", "refs/heads/main", "README.md"), task, Deny, RuleBaseBranch, nil},
		{"a write to the default branch", putFile("acme/payments", "trunk", "README.md"), task, Deny, RuleBaseBranch,
			[]string{"trunk is the default branch of acme/payments", "capstan/"}},
		{"a branch without the prefix", createBranch("acme/payments", "fix-typo"), task, Deny, RuleBranchPrefix,
			[]string{"fix-typo does not start with capstan/", "name it capstan/fix-typo"}},
		{"a branch with another configured prefix", createBranch("acme/payments", "capstan/x"),
			Task{Repositories: []string{"acme/payments"}, Base: "main", BranchPrefix: "bot/"}, Deny, RuleBranchPrefix,
			[]string{"does not start with bot/", "name it bot/capstan/x"}},
		{"a workflow file", putFile("acme/payments", "capstan/x", ".github/workflows/ci.yml"), task, Deny, RuleWorkflowFiles,
			[]string{".github/workflows/ci.yml is under .github/", "files elsewhere are allowed"}},
		{"a workflow file by a detour", putFile("acme/payments", "capstan/x", "docs/../.GitHub/Workflows/ci.yml"), task, Deny, RuleWorkflowFiles, nil},
		{"a read of a workflow file", Call{Tool: "github_get_file", Class: capstan.ClassReadOnly, Repository: "acme/payments",
			Path: ".github/workflows/ci.yml"}, task, Allow, RuleRead, []string{"reads of this task's repositories are allowed: acme/payments"}},
		{"a read of the base branch", Call{Tool: "github_get_file", Class: capstan.ClassReadOnly, Repository: "acme/payments", Branch: "main",
			Path: "go.mod"}, task, Allow, RuleRead, nil},
		{"a compliant branch", createBranch("acme/payments", "capstan/fix-typo"), task, Allow, RuleAllow,
			[]string{"acme/payments", "base branch main and the default branch trunk", "capstan/", ".github/", "action.yml"}},
		{"a compliant file", putFile("acme/payments", "capstan/fix-typo", "README.md"), created(task), Allow, RuleAllow, nil},
		{"a pull request into the base", Call{Tool: "github_create_pull_request", Class: capstan.ClassConditional, Repository: "acme/payments",
			Branch: "capstan/fix-typo", Into: "main", Writes: true}, task, Allow, RuleAllow, nil},
		{"a comment", Call{Tool: "github_comment", Class: capstan.ClassUnsafe, Repository: "acme/payments"}, task, Allow, RuleAllow, nil},
		{"an MCP tool", Call{Tool: "search", Class: capstan.ClassReadOnly, Server: "docs"}, task, Allow, RuleRead, nil},
		{"a task with no repository", putFile("acme/payments", "capstan/x", "a"), Task{Base: "main"}, Deny, RuleRepository,
			[]string{"outside this task's repositories: none"}},
		{"a class that writes though Writes is false", Call{Tool: "github_put_file", Class: capstan.ClassIdempotent, Repository: "acme/payments",
			Branch: "main", Path: "a"}, task, Deny, RuleBaseBranch, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, p := range []*Policy{nil, Builtin()} {
				d := p.Decide(tc.call, tc.task)
				if d.Effect != tc.effect || d.Rule != tc.rule {
					t.Fatalf("decision %s, want %s by %s", d, tc.effect, tc.rule)
				}
				for _, want := range tc.reason {
					if !strings.Contains(d.Reason, want) {
						t.Errorf("reason %q does not say %q", d.Reason, want)
					}
				}
			}
		})
	}
}

// mustParse parses text as policy.yaml.
func mustParse(t testing.TB, text string) *Policy {
	t.Helper()
	p, err := Parse("policy.yaml", []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

const rulesFile = `rules:
  - name: prod-pull-requests
    tool: github_create_pull_request
    when: labels[?"env"].orValue("") == "prod"
    effect: require_approval
  - name: docs-anywhere
    repository: "acme/*"
    path: "docs/**"
    effect: allow
  - name: no-vendor
    path: [vendor/**, third_party/**]
    effect: deny
    reason: vendored code is updated by the dependency bot, not by tasks
  - name: big-tenant-comments
    class: unsafe
    when: tenant == "big" && "acme/payments" in task.repositories
    effect: deny
    reason: tenant big takes no comments from tasks
  - name: every-pull-request
    tool: github_create_pull_request
    effect: allow
    reason: pull requests are how changes are proposed
`

// The file's first rule that matches decides its layer; the defaults decide
// on their own, and a deny of either wins.
func TestFileRules(t *testing.T) {
	t.Parallel()
	p := mustParse(t, rulesFile)
	pr := Call{Tool: "github_create_pull_request", Class: capstan.ClassConditional, Repository: "acme/payments", Branch: "capstan/x", Into: "main", Writes: true}
	prod := task
	prod.Labels = map[string]string{"env": "prod"}
	big := task
	big.Tenant = "big"
	comment := Call{Tool: "github_comment", Class: capstan.ClassUnsafe, Repository: "acme/payments", Writes: true}
	for _, tc := range []struct {
		name   string
		call   Call
		task   Task
		effect Effect
		rule   string
		reason string
	}{
		{"a label makes a pull request wait", pr, prod, RequireApproval, "prod-pull-requests", "rule prod-pull-requests (line 2) requires a person's approval of github_create_pull_request"},
		{"without the label a later rule decides", pr, task, Allow, "every-pull-request", "pull requests are how changes are proposed"},
		{"the first match decides the file's layer", putFile("acme/payments", "capstan/x", "docs/a.md"), task, Allow, "docs-anywhere", "rule docs-anywhere (line 6) allows github_put_file"},
		{"a file's allow does not override a default's deny", putFile("acme/docs", "main", "docs/a.md"), task, Deny, RuleRepository, "acme/docs is outside this task's repositories: acme/payments"},
		{"a list of globs", putFile("acme/payments", "capstan/x", "third_party/lib/a.go"), task, Deny, "no-vendor", "vendored code is updated by the dependency bot, not by tasks"},
		{"* stops at a slash", putFile("acme/payments", "capstan/x", "docsy/a.md"), created(task), Allow, RuleAllow, ""},
		{"the tenant decides", comment, big, Deny, "big-tenant-comments", "tenant big takes no comments from tasks"},
		{"another tenant goes to the defaults", comment, task, Allow, RuleAllow, ""},
		{"no rule: the defaults refuse", putFile("acme/other", "capstan/x", "a.go"), task, Deny, RuleRepository, "acme/other is outside this task's repositories: acme/payments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := p.Decide(tc.call, tc.task)
			if d.Effect != tc.effect || d.Rule != tc.rule || tc.reason != "" && d.Reason != tc.reason {
				t.Errorf("decision %s, want %s by %s: %s", d, tc.effect, tc.rule, tc.reason)
			}
		})
	}
	var names []string
	for _, r := range p.Rules() {
		names = append(names, fmt.Sprintf("%s@%d", r.Name, r.Line))
	}
	if got := strings.Join(names, " "); got != "prod-pull-requests@2 docs-anywhere@6 no-vendor@10 big-tenant-comments@14 every-pull-request@19" {
		t.Errorf("rules: %s", got)
	}
}

// A condition that cannot be evaluated refuses the call, named by its rule.
func TestConditionErrorRefuses(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `rules:
  - name: by-env
    when: labels["env"] == "prod"
    effect: allow
`)
	d := p.Decide(putFile("acme/payments", "capstan/x", "a"), task)
	if !d.Refused() || d.Rule != "by-env" || !strings.Contains(d.Reason, "could not be evaluated") {
		t.Errorf("decision %s, want a refusal by by-env", d)
	}
	task := task
	task.Labels = map[string]string{"env": "prod"}
	if d := p.Decide(putFile("acme/payments", "capstan/x", "a"), task); !d.Allowed() || d.Rule != "by-env" {
		t.Errorf("with the label: %s, want allow by by-env", d)
	}
}

// Each kind of bad file is refused with one sentence naming the rule and
// the line.
func TestBadFiles(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, text string
		line       int
		rule       string
		problem    string
	}{
		{"unknown key", "rules:\n  - name: a\n    effect: allow\n    tools: x\n", 4, `"a"`, `unknown key "tools"`},
		{"unknown top-level key", "rule:\n  - name: a\n", 1, "", `unknown key "rule"`},
		{"bad effect", "rules:\n  - name: a\n    effect: maybe\n", 3, `"a"`, `effect "maybe" is none of allow, deny, require_approval`},
		{"no effect", "rules:\n  - name: a\n    tool: x\n", 2, `"a"`, "has no effect"},
		{"deny without a reason", "rules:\n  - name: a\n    effect: deny\n", 2, `"a"`, "a deny rule needs a reason"},
		{"no name", "rules:\n  - effect: allow\n  - tool: x\n", 2, "rule 1", "has no name"},
		{"a default's name", "rules:\n  - name: default/repository\n    effect: allow\n", 2, `"default/repository"`, "are the default rules'"},
		{"duplicate name", "rules:\n  - name: a\n    effect: allow\n  - name: b\n    effect: allow\n  - name: a\n    effect: allow\n", 6, `"a"`,
			"the name is already that of the rule at line 2"},
		{"CEL that does not compile", "rules:\n  - name: a\n    effect: allow\n    when: lables.env == 'x'\n", 4, `"a"`,
			"its condition does not compile: undeclared reference to 'lables'"},
		{"CEL that is not boolean", "rules:\n  - name: a\n    effect: allow\n    when: tenant + \"x\"\n", 4, `"a"`, "its condition is string, not a bool"},
		{"a misspelt task variable", "rules:\n  - name: a\n    effect: allow\n    when: task.bse == 'main'\n", 4, `"a"`, "does not compile"},
		{"bad class", "rules:\n  - name: a\n    effect: allow\n    class: [read_only, dangerous]\n", 4, `"a"`, `class "dangerous" is none of`},
		{"match field not a string", "rules:\n  - name: a\n    effect: allow\n    path: {a: b}\n", 4, `"a"`, "path is neither a string nor a list"},
		// The YAML parser names the line where the unclosed list's context begins.
		{"not YAML", "rules:\n  - name: a\n    effect: allow\n    reason: [a\n", 3, "", "is not YAML: did not find expected ',' or ']'"},
		{"a key twice", "rules:\n  - name: a\n    effect: allow\n    effect: deny\n", 4, `"a"`, "effect is given twice (first at line 3)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("policy.yaml", []byte(tc.text))
			var fe *FileError
			if !errors.As(err, &fe) {
				t.Fatalf("Parse: %v, want a *FileError", err)
			}
			msg := err.Error()
			if fe.Line != tc.line || fe.Rule != tc.rule || !strings.Contains(fe.Problem, tc.problem) || strings.Contains(msg, "\n") {
				t.Errorf("error %q (line %d, rule %s), want line %d, rule %s, saying %q, one line", msg, fe.Line, fe.Rule, tc.line, tc.rule, tc.problem)
			}
			if want := fmt.Sprintf("policy file policy.yaml, line %d", tc.line); !strings.HasPrefix(msg, want) {
				t.Errorf("error %q does not start with %q", msg, want)
			}
		})
	}
}

// An empty file, or one without rules, is the defaults.
func TestEmptyFileIsTheDefaults(t *testing.T) {
	t.Parallel()
	for _, text := range []string{"", "# nothing\n", "rules:\n", "rules: []\n"} {
		p := mustParse(t, text)
		if len(p.Rules()) != 0 {
			t.Errorf("%q: %d rules", text, len(p.Rules()))
		}
		if d := p.Decide(putFile("acme/payments", "main", "a"), task); d.Rule != RuleBaseBranch {
			t.Errorf("%q: %s, want the defaults' refusal", text, d)
		}
	}
}

// AlwaysRefused says true only when no call of the tool can be let
// through.
func TestAlwaysRefused(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `rules:
  - name: comments-for-reviewers
    tool: github_comment
    repository: acme/reviews
    effect: allow
  - name: no-comments
    tool: github_comment
    effect: deny
    reason: tasks do not comment
  - name: no-writes-for-guests
    class: [idempotent, conditional]
    when: labels[?"role"].orValue("") == "guest"
    effect: deny
    reason: guests' tasks only read
  - name: no-vendor
    tool: github_get_file
    path: vendor/**
    effect: deny
    reason: vendor is not read
  - name: mcp-search
    server: docs
    when: path == ""
    effect: allow
  - name: no-mcp
    server: docs
    effect: deny
    reason: no MCP
`)
	guest := task
	guest.Labels = map[string]string{"role": "guest"}
	for _, tc := range []struct {
		name   string
		tool   string
		class  capstan.Class
		server string
		task   Task
		want   bool
		rule   string
	}{
		{"an earlier allow rule that depends on the repository", "github_comment", capstan.ClassUnsafe, "", task, false, ""},
		{"a condition on labels, true", "github_put_file", capstan.ClassIdempotent, "", guest, true, "no-writes-for-guests"},
		{"a condition on labels, false", "github_put_file", capstan.ClassIdempotent, "", task, false, ""},
		{"a deny rule on a path refuses only some calls", "github_get_file", capstan.ClassReadOnly, "", task, false, ""},
		{"an allow condition on the arguments comes first", "search", capstan.ClassReadOnly, "docs", task, false, ""},
		{"the defaults refuse no tool", "github_create_branch", capstan.ClassConditional, "", task, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, got := p.AlwaysRefused(tc.tool, tc.class, tc.server, tc.task)
			if got != tc.want || d.Rule != tc.rule {
				t.Errorf("AlwaysRefused = %v (%s), want %v (%s)", got, d, tc.want, tc.rule)
			}
		})
	}
	p = mustParse(t, "rules:\n  - name: no-comments\n    tool: github_comment\n    effect: deny\n    reason: tasks do not comment\n")
	if d, ok := p.AlwaysRefused("github_comment", capstan.ClassUnsafe, "", task); !ok || d.Rule != "no-comments" || d.Reason != "tasks do not comment" {
		t.Errorf("a plain deny rule on the tool: %v %s", ok, d)
	}
	if _, ok := Builtin().AlwaysRefused("github_comment", capstan.ClassUnsafe, "", Task{}); ok {
		t.Error("the defaults refused a tool whole")
	}
}

func TestGlob(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"acme/*", "acme/payments", true},
		{"acme/*", "acme/a/b", false},
		{"docs/**", "docs/a/b.md", true},
		{"**/*.md", "docs/a/b.md", true},
		{"**.md", "a.md", true},
		{"release/v?", "release/v1", true},
		{"release/v?", "release/v10", false},
		{"a?b", "a/b", false},
		{"github_*", "github_put_file", true},
		{"x", "", false},
	} {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v", tc.pattern, tc.s, got)
		}
	}
}

// A Policy is safe for concurrent use: decisions made at once from several
// goroutines (under -race) are each the decision made alone.
func TestDecideConcurrently(t *testing.T) {
	t.Parallel()
	p := mustParse(t, rulesFile)
	prod := task
	prod.Labels = map[string]string{"env": "prod"}
	pr := Call{Tool: "github_create_pull_request", Class: capstan.ClassConditional, Repository: "acme/payments", Branch: "capstan/x", Writes: true}
	done := make(chan string)
	for g := range 4 {
		go func() {
			var bad string
			for i := range 200 {
				tk, want := task, "every-pull-request"
				if (g+i)%2 == 0 {
					tk, want = prod, "prod-pull-requests"
				}
				if d := p.Decide(pr, tk); d.Rule != want && bad == "" {
					bad = fmt.Sprintf("goroutine %d, decision %d: %s, want %s", g, i, d, want)
				}
			}
			done <- bad
		}()
	}
	for range 4 {
		if bad := <-done; bad != "" {
			t.Error(bad)
		}
	}
}

// --require-approval names a tool or a class: a call of it that the rules
// allow waits for a person (task/require-approval); a call they refuse
// stays refused, and other calls are decided as before.
func TestRequireApproval(t *testing.T) {
	t.Parallel()
	pr := Call{Tool: "github_create_pull_request", Class: capstan.ClassConditional, Repository: "acme/payments", Branch: "capstan/x", Into: "main", Writes: true}
	byTool, byClass := created(task), created(task)
	byTool.RequireApproval = []string{"github_create_pull_request"}
	byClass.RequireApproval = []string{string(capstan.ClassIdempotent)}
	for _, tc := range []struct {
		name   string
		call   Call
		task   Task
		effect Effect
		rule   string
	}{
		{"the tool named", pr, byTool, RequireApproval, RuleRequireApproval},
		{"another tool", putFile("acme/payments", "capstan/x", "a.md"), byTool, Allow, RuleAllow},
		{"the class named", putFile("acme/payments", "capstan/x", "a.md"), byClass, RequireApproval, RuleRequireApproval},
		{"another class", pr, byClass, Allow, RuleAllow},
		{"a refusal stays a refusal", putFile("acme/payments", "main", "a.md"), byClass, Deny, RuleBaseBranch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Builtin().Decide(tc.call, tc.task)
			if d.Effect != tc.effect || d.Rule != tc.rule {
				t.Errorf("decision %s, want %s by %s", d, tc.effect, tc.rule)
			}
			if d.Effect == RequireApproval && !strings.Contains(d.Reason, "--require-approval") {
				t.Errorf("reason %q does not name --require-approval", d.Reason)
			}
		})
	}
	// A file's allow is still subject to the task's --require-approval.
	p := mustParse(t, rulesFile)
	if d := p.Decide(pr, byTool); d.Effect != RequireApproval || d.Rule != RuleRequireApproval {
		t.Errorf("with a file that allows it: %s, want require_approval by %s", d, RuleRequireApproval)
	}
}
