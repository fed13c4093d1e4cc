package activities_test

import (
	"context"
	"strings"
	"testing"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/policy"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// execute runs ExecuteTool for one call of the task T and returns its
// result.
func execute(t *testing.T, f *fixture, op, impl, args string, tp *contract.TaskPolicy) contract.ExecuteToolResult {
	t.Helper()
	in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T", TurnID: "T/t1", ToolCallID: "call-" + op, OperationID: op,
		Tool: impl, Arguments: f.args(t, args), Policy: tp}
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatalf("%s: %v", op, err)
	}
	var res contract.ExecuteToolResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// A task started with one rule that allows everything may still write only
// where the defaults let it: its rules are decided as a layer of their own,
// and the defaults' deny wins, before anything is sent.
func TestTaskRulesThatAllowEverythingDoNotWidenTheDefaults(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tp := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Tenant: "default",
		File: "task.yaml", Source: "rules:\n  - name: all\n    effect: allow\n"}
	for _, tc := range []struct{ op, impl, args, rule string }{
		{"op-base", githubtools.NamePutFile, `{"repo":"acme/app","branch":"main","path":"a.md","content":"c","message":"m"}`, policy.RuleBaseBranch},
		{"op-other", githubtools.NameCreateBranch, `{"repo":"acme/other","branch":"capstan/x","from":"main"}`, policy.RuleRepository},
		{"op-workflow", githubtools.NamePutFile, `{"repo":"acme/app","branch":"capstan/x","path":".github/workflows/ci.yml","content":"c","message":"m"}`,
			policy.RuleWorkflowFiles},
		{"op-prefix", githubtools.NameCreateBranch, `{"repo":"acme/app","branch":"release/v9","from":"main"}`, policy.RuleBranchPrefix},
	} {
		res := execute(t, f, tc.op, tc.impl, tc.args, tp)
		if res.State != capstan.OutcomeFailed || res.Decision == nil || !res.Decision.Refused || res.Decision.Rule != tc.rule ||
			res.Decision.Layer != policy.LayerDefault {
			t.Errorf("%s: %+v (decision %+v), want refused by %s of the defaults", tc.op, res, res.Decision, tc.rule)
		}
	}
	if s := f.sb.GitHub.Stats(); s.Requests != 0 {
		t.Errorf("GitHub handled %d requests (%+v), want none: every call was refused", s.Requests, s)
	}
	res := execute(t, f, "op-ok", githubtools.NameCreateBranch, `{"repo":"acme/app","branch":"capstan/x","from":"main"}`, tp)
	if res.State != capstan.OutcomeSucceeded || res.Decision == nil || res.Decision.Rule != "all" || res.Decision.Layer != "task task.yaml" {
		t.Errorf("a compliant call: %+v (decision %+v), want succeeded, allowed by all of task task.yaml", res, res.Decision)
	}
}

// The worker's own policy file is a floor: decided on every call beside
// the defaults and the task's rules, its deny holds whatever the task's
// rules allow. Two workers of one pool with different floors each decide
// by their own, and the ledger's record of each decision names the layer
// and the file that made it.
func TestWorkerPolicyIsAFloor(t *testing.T) {
	t.Parallel()
	floor, err := policy.Parse("/etc/capstan/policy.yaml", []byte(`rules:
  - name: no-branches-here
    tool: github_create_branch
    effect: deny
    reason: on this worker, branches are made by people
`))
	if err != nil {
		t.Fatal(err)
	}
	strict := newFixture(t, func(d *activities.Deps) { d.Floor = floor })
	lax := newFixture(t, func(d *activities.Deps) { d.Ledger = strict.ledger })
	tp := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Tenant: "default",
		File: "task.yaml", Source: "rules:\n  - name: all\n    effect: allow\n"}
	args := `{"repo":"acme/app","branch":"capstan/x","from":"main"}`
	res := execute(t, strict, "op-strict", githubtools.NameCreateBranch, args, tp)
	if res.State != capstan.OutcomeFailed || res.Decision == nil || res.Decision.Rule != "no-branches-here" ||
		!strings.HasPrefix(res.Decision.Layer, "worker /etc/capstan/policy.yaml@") {
		t.Errorf("the strict worker: %+v (decision %+v), want refused by no-branches-here of its own file", res, res.Decision)
	}
	if n := strict.sb.GitHub.Stats().Requests; n != 0 {
		t.Errorf("the strict worker's GitHub handled %d requests, want none", n)
	}
	res = execute(t, lax, "op-lax", githubtools.NameCreateBranch, args, tp)
	if res.State != capstan.OutcomeSucceeded || res.Decision == nil || res.Decision.Rule != "all" {
		t.Errorf("the worker without a file: %+v (decision %+v), want succeeded, allowed by all", res, res.Decision)
	}
	ds, err := strict.ledger.Decisions(context.Background(), "T")
	if err != nil || len(ds) != 2 {
		t.Fatalf("Decisions = %+v, %v; want two", ds, err)
	}
	got := map[string]string{}
	for _, d := range ds {
		got[d.OperationID] = d.Rule + " of " + d.Layer
	}
	if !strings.HasPrefix(got["op-strict"], "no-branches-here of worker /etc/capstan/policy.yaml@") || got["op-lax"] != "all of task task.yaml" {
		t.Errorf("recorded decisions %v, want op-strict by the strict worker's file and op-lax by the task's", got)
	}
}

// An override in the worker's file lifts its default for the calls its rule
// decides, and only those; the same rule among a task's rules lifts
// nothing, and nothing is sent for what it does not lift.
func TestOnlyTheWorkersOverrideLiftsADefault(t *testing.T) {
	t.Parallel()
	const docsOnMain = "rules:\n  - name: docs-on-main\n    tool: github_put_file\n    branch: main\n    path: docs/**\n" +
		"    override: default/base-branch\n    effect: allow\n"
	floor, err := policy.Parse("/etc/capstan/policy.yaml", []byte(docsOnMain))
	if err != nil {
		t.Fatal(err)
	}
	worker := newFixture(t, func(d *activities.Deps) { d.Floor = floor })
	tp := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Tenant: "default"}
	docs := `{"repo":"acme/app","branch":"main","path":"docs/a.md","content":"c","message":"m"}`
	res := execute(t, worker, "op-docs", githubtools.NamePutFile, docs, tp)
	if res.State != capstan.OutcomeSucceeded || res.Decision == nil || res.Decision.Rule != "docs-on-main" ||
		!strings.HasPrefix(res.Decision.Layer, "worker /etc/capstan/policy.yaml@") {
		t.Errorf("docs on main by the worker's override: %+v (decision %+v), want succeeded, allowed by docs-on-main of the worker's file", res, res.Decision)
	}
	res = execute(t, worker, "op-code", githubtools.NamePutFile, `{"repo":"acme/app","branch":"main","path":"a.go","content":"c","message":"m"}`, tp)
	if res.State != capstan.OutcomeFailed || res.Decision == nil || !res.Decision.Refused || res.Decision.Rule != policy.RuleBaseBranch {
		t.Errorf("code on main, which the override does not match: %+v (decision %+v), want refused by %s", res, res.Decision, policy.RuleBaseBranch)
	}

	task := newFixture(t)
	byTask := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Tenant: "default", File: "task.yaml", Source: docsOnMain}
	res = execute(t, task, "op-task-docs", githubtools.NamePutFile, docs, byTask)
	if res.State != capstan.OutcomeFailed || res.Decision == nil || !res.Decision.Refused || res.Decision.Rule != policy.RuleBaseBranch ||
		res.Decision.Layer != policy.LayerDefault {
		t.Errorf("docs on main by the task's override: %+v (decision %+v), want refused by %s of the defaults", res, res.Decision, policy.RuleBaseBranch)
	}
	if n := task.sb.GitHub.Stats().Requests; n != 0 {
		t.Errorf("GitHub handled %d requests for the task's override, want none", n)
	}
}
