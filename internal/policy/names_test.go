package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/capstanhq/capstan"
)

// A repository's name compares without case, as GitHub compares it,
// everywhere a rule can see it: a deny rule's condition on acme/payments
// refuses a call of ACME/Payments, and of a task started with
// --repo ACME/payments.
func TestRepositoryNamesCompareWithoutCase(t *testing.T) {
	t.Parallel()
	p := mustParse(t, `rules:
  - name: no-payments
    when: repository == "acme/payments"
    effect: deny
    reason: payments is changed by people
  - name: no-payments-tasks
    tool: github_comment
    when: '"acme/payments" in task.repositories'
    effect: deny
    reason: tasks of payments do not comment
`)
	if d := p.Decide(putFile("ACME/Payments", "capstan/x", "a.md"), task); !d.Refused() || d.Rule != "no-payments" {
		t.Errorf("ACME/Payments: %s, want deny by no-payments", d)
	}
	upper := task
	upper.Repositories = []string{"ACME/payments"}
	comment := Call{Tool: "github_comment", Class: capstan.ClassUnsafe, Repository: "acme/payments", Writes: true}
	if d := p.Decide(comment, upper); !d.Refused() || d.Rule != "no-payments" {
		t.Errorf("a task of ACME/payments: %s, want deny by no-payments", d)
	}
	comment.Repository = ""
	if d := p.Decide(comment, upper); !d.Refused() || d.Rule != "no-payments-tasks" {
		t.Errorf("a task of ACME/payments, a call of no repository: %s, want deny by no-payments-tasks", d)
	}
}

// A condition that compares a repository with a literal holding upper case
// could never be true once names are folded, so a deny there would never
// refuse: the file is refused instead, naming the file, the line and the
// rule.
func TestUpperCaseRepositoryLiteralIsRefused(t *testing.T) {
	t.Parallel()
	for _, when := range []string{
		`repository == "ACME/payments"`,
		`repository in ["acme/a", "Acme/b"]`,
		`"Acme/payments" in task.repositories`,
		`repository.startsWith("Acme/")`,
		`task.repositories.exists(r, r == "Acme/x")`,
	} {
		text := "rules:\n  - name: r\n    effect: deny\n    reason: no\n    when: '" + when + "'\n"
		_, err := Parse("policy.yaml", []byte(text))
		var fe *FileError
		if !errors.As(err, &fe) || fe.Line != 5 || fe.Rule != `"r"` || !strings.Contains(fe.Problem, "lower case") {
			t.Errorf("when %s: %v, want a refusal at line 5 of rule r saying names compare in lower case", when, err)
		}
	}
	for _, when := range []string{
		`repository == "acme/payments" && labels[?"env"].orValue("") == "Prod"`,
		`tenant == "Big"`,
	} {
		text := "rules:\n  - name: r\n    effect: deny\n    reason: no\n    when: '" + when + "'\n"
		if _, err := Parse("policy.yaml", []byte(text)); err != nil {
			t.Errorf("when %s: %v, want it accepted (no repository compared with upper case)", when, err)
		}
	}
}

// Branches and refs are normalised once, before any rule, the task's base
// too: refs/heads/x and heads/x are x, and HEAD is the repository's
// default branch — refused when that is not known.
func TestRefsAreNormalised(t *testing.T) {
	t.Parallel()
	p := mustParse(t, "rules:\n  - name: no-release\n    branch: release/*\n    effect: deny\n    reason: release branches are cut by people\n")
	refsBase := task
	refsBase.Base = "refs/heads/main"
	unknown := task
	unknown.DefaultBranch = ""
	allowRelease := task // --allow-branch release/v2, so that default/own-branch lets the rule decide
	allowRelease.AllowBranches = []string{"release/v2"}
	release := task
	release.BranchPrefix = "release/"
	for _, tc := range []struct {
		name string
		call Call
		task Task
		rule string
	}{
		{"heads/ of the base", putFile("acme/payments", "heads/main", "a.md"), task, RuleBaseBranch},
		{"refs/heads/ of the default", putFile("acme/payments", "refs/heads/trunk", "a.md"), task, RuleBaseBranch},
		{"HEAD is the default branch", putFile("acme/payments", "HEAD", "a.md"), task, RuleBaseBranch},
		{"HEAD with the default unknown", putFile("acme/payments", "HEAD", "a.md"), unknown, RuleRef},
		{"a base given as a ref", putFile("acme/payments", "main", "a.md"), refsBase, RuleBaseBranch},
		{"a rule's branch through heads/", putFile("acme/payments", "heads/release/v2", "a.md"), allowRelease, "no-release"},
		{"a created branch through heads/", createBranch("acme/payments", "heads/release/v2"), release, "no-release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := p.Decide(tc.call, tc.task); !d.Refused() || d.Rule != tc.rule {
				t.Errorf("decision %s, want deny by %s", d, tc.rule)
			}
		})
	}
	from := createBranch("acme/payments", "capstan/x")
	from.From = "refs/heads/main"
	p = mustParse(t, "rules:\n  - name: from-main\n    when: from == \"main\"\n    effect: require_approval\n")
	if d := p.Decide(from, task); d.Effect != RequireApproval {
		t.Errorf("from refs/heads/main: %s, want require_approval by from-main", d)
	}
}
