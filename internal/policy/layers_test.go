package policy

import (
	"errors"
	"strings"
	"testing"

	"github.com/capstanhq/capstan"
)

// parseAs parses text as the file name.
func parseAs(t testing.TB, name, text string) *Policy {
	t.Helper()
	p, err := Parse(name, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// A task's rules narrow, never widen: started with one rule that allows
// everything, a task is still refused what the defaults refuse.
func TestTaskRulesCannotWidenTheDefaults(t *testing.T) {
	t.Parallel()
	all := parseAs(t, "task.yaml", "rules:\n  - name: all\n    effect: allow\n")
	for _, tc := range []struct {
		name string
		call Call
		rule string
	}{
		{"another repository", putFile("acme/other", "main", "a.go"), RuleRepository},
		{"the base branch", putFile("acme/payments", "main", "a.go"), RuleBaseBranch},
		{"a workflow", putFile("acme/payments", "capstan/x", ".github/workflows/ci.yml"), RuleWorkflowFiles},
		{"a branch without the prefix", createBranch("acme/payments", "release/v3"), RuleBranchPrefix},
	} {
		for _, s := range []Stack{{Task: all}, {Floor: all}} {
			if d := s.Decide(tc.call, task); !d.Refused() || d.Rule != tc.rule || d.Layer != LayerDefault {
				t.Errorf("%s: decision %s (layer %q), want deny by %s of the defaults", tc.name, d, d.Layer, tc.rule)
			}
		}
	}
	if d := (Stack{Task: all}).Decide(putFile("acme/payments", "capstan/x", "a.go"), task); !d.Allowed() || d.Rule != "all" || d.Layer != "task task.yaml" {
		t.Errorf("a compliant write: %s (layer %q), want allow by all of task task.yaml", d, d.Layer)
	}
}

const floorFile = `rules:
  - name: release-fixes
    tool: github_put_file
    branch: release/*
    override: default/base-branch
    effect: allow
    reason: the release bot's tasks fix release branches
  - name: no-payments-comments
    tool: github_comment
    repository: acme/payments
    effect: deny
    reason: payments takes no comments from tasks
  - name: prs-wait
    tool: github_create_pull_request
    effect: require_approval
`

// Each layer decides on its own and a deny in any wins, then
// require_approval; the worker's file alone loosens a default (override),
// and a decision names its layer and file.
func TestLayersCombine(t *testing.T) {
	t.Parallel()
	floor := parseAs(t, "/etc/capstan/policy.yaml", floorFile)
	taskRules := parseAs(t, "task.yaml", `rules:
  - name: anything
    effect: allow
  - name: release-too
    override: default/base-branch
    effect: allow
`)
	releaseTask := task
	releaseTask.Base = "release/v2"
	comment := Call{Tool: "github_comment", Class: capstan.ClassUnsafe, Repository: "acme/payments", Writes: true}
	pr := Call{Tool: "github_create_pull_request", Class: capstan.ClassConditional, Repository: "acme/payments", Branch: "capstan/x", Into: "main", Writes: true}
	worker := floor.layer(LayerWorker)
	if !strings.HasPrefix(worker, "worker /etc/capstan/policy.yaml@") || len(worker) != len("worker /etc/capstan/policy.yaml@")+12 {
		t.Errorf("the worker's layer is %q, want worker FILE@ and 12 hex digits", worker)
	}
	for _, tc := range []struct {
		name   string
		stack  Stack
		call   Call
		task   Task
		effect Effect
		rule   string
		layer  string
	}{
		{"the worker's override lifts its default", Stack{Floor: floor}, putFile("acme/payments", "release/v2", "a.go"), releaseTask, Allow, "release-fixes", worker},
		{"lifting base-branch leaves own-branch on every other branch", Stack{Floor: floor}, putFile("acme/payments", "release/v3", "a.go"), releaseTask, Deny, RuleOwnBranch, LayerDefault},
		{"the override lifts no other default", Stack{Floor: floor}, putFile("acme/other", "release/v2", "a.go"), releaseTask, Deny, RuleRepository, LayerDefault},
		{"where the override does not match, the default refuses", Stack{Floor: floor}, putFile("acme/payments", "main", "a.go"), task, Deny, RuleBaseBranch, LayerDefault},
		{"a task's override lifts nothing", Stack{Task: taskRules}, putFile("acme/payments", "release/v2", "a.go"), releaseTask, Deny, RuleBaseBranch, LayerDefault},
		{"the worker's deny beats the task's allow", Stack{Floor: floor, Task: taskRules}, comment, task, Deny, "no-payments-comments", worker},
		{"the worker's approval beats the task's allow", Stack{Floor: floor, Task: taskRules}, pr, task, RequireApproval, "prs-wait", worker},
		{"the task's allow is the most specific", Stack{Floor: floor, Task: taskRules}, putFile("acme/payments", "capstan/x", "a.go"), task, Allow, "anything", "task task.yaml"},
		{"the defaults alone", Stack{}, putFile("acme/payments", "capstan/x", "a.go"), task, Allow, RuleAllow, LayerDefault},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if d := tc.stack.Decide(tc.call, tc.task); d.Effect != tc.effect || d.Rule != tc.rule || d.Layer != tc.layer {
				t.Errorf("decision %s (layer %q), want %s by %s of %s", d, d.Layer, tc.effect, tc.rule, tc.layer)
			}
		})
	}
	taskDeny := parseAs(t, "task.yaml", "rules:\n  - name: no-docs\n    path: docs/**\n    effect: deny\n    reason: docs are written by people\n")
	if d := (Stack{Floor: floor, Task: taskDeny}).Decide(putFile("acme/payments", "release/v2", "docs/a.md"), releaseTask); d.Rule != "no-docs" || d.Layer != "task task.yaml" {
		t.Errorf("the task's deny under the worker's override: %s (layer %q), want deny by no-docs of the task", d, d.Layer)
	}
	// A tool refused whole by either file is not offered.
	noComments := parseAs(t, "task.yaml", "rules:\n  - name: no-comments\n    tool: github_comment\n    effect: deny\n    reason: no comments\n")
	for _, s := range []Stack{{Floor: noComments, Task: taskRules}, {Floor: floor, Task: noComments}} {
		if d, ok := s.AlwaysRefused("github_comment", capstan.ClassUnsafe, "", task); !ok || d.Rule != "no-comments" {
			t.Errorf("AlwaysRefused = %v, %s; want refused by no-comments", ok, d)
		}
	}
	if _, ok := (Stack{Floor: floor, Task: taskRules}).AlwaysRefused("github_comment", capstan.ClassUnsafe, "", task); ok {
		t.Error("AlwaysRefused: a deny on one repository refused the tool whole")
	}
}

// An override names a default rule that refuses, on an allow rule; else
// the file is refused with one sentence.
func TestBadOverrides(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ text, problem string }{
		{"rules:\n  - name: a\n    effect: allow\n    override: default/nothing\n", `override "default/nothing" is none of the default rules that refuse: default/repository, `},
		{"rules:\n  - name: a\n    effect: allow\n    override: default/allow\n", `override "default/allow" is none of`},
		{"rules:\n  - name: a\n    effect: deny\n    reason: r\n    override: default/repository\n", "its effect is allow, not deny"},
	} {
		_, err := Parse("policy.yaml", []byte(tc.text))
		var fe *FileError
		if !errors.As(err, &fe) || fe.Rule != `"a"` || fe.Line < 4 || !strings.Contains(fe.Problem, tc.problem) {
			t.Errorf("%q: %v, want a refusal of rule a saying %q", tc.text, err, tc.problem)
		}
	}
}
