package activities_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/metrics"
	"github.com/capstanhq/capstan/internal/model"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

const docsFrozen = "rules:\n  - name: docs-frozen\n    tool: github_put_file\n    path: docs/**\n    effect: deny\n    reason: docs are frozen\n"

// The chain's first turn, given the policy file's text with its reference
// (changePolicyByReference), stores it in the ledger with the turn; a
// worker that has not compiled it yet, given only the reference, loads it
// from there and decides by its rules. A reference the ledger does not
// hold fails the call worker_misconfigured, sending nothing.
func TestPolicyByReferenceIsStoredWithTheFirstTurnAndLoadedOnAMiss(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ref := ledger.ItemRef(contract.PolicyItem("policy.yaml", docsFrozen))
	// --allow-branch capstan/x: default/own-branch lets the task's rule decide.
	full := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", AllowBranches: []string{"capstan/x"}, File: "policy.yaml", Source: docsFrozen, SourceRef: ref}
	seed := []model.Message{{Role: model.RoleSystem, Content: "You are a test.\nTask id: T"}, {Role: model.RoleUser, Content: "go"}}
	if _, err := f.env.ExecuteActivity(f.acts.ModelTurn, contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1", AttemptID: "T/t1/a1",
		Model: "sandbox:demo", Seed: seed, Policy: full}); err != nil {
		t.Fatal(err)
	}
	data, err := f.ledger.GetItem(context.Background(), ref)
	if err != nil {
		t.Fatalf("the policy item after the first turn: %v", err)
	}
	if file, src, err := contract.ParsePolicyItem(data); err != nil || file != "policy.yaml" || src != docsFrozen {
		t.Fatalf("the policy item = %q, %q, %v", file, src, err)
	}

	other := newFixture(t, func(d *activities.Deps) { d.Ledger = f.ledger })
	byRef := *full
	byRef.Source = ""
	in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T", TurnID: "T/t1", ToolCallID: "call_1", OperationID: "op-docs",
		Tool: githubtools.NamePutFile, Arguments: f.args(t, `{"repo":"acme/app","branch":"capstan/x","path":"docs/a.md","content":"c","message":"m"}`),
		Policy: &byRef}
	v, err := other.env.ExecuteActivity(other.acts.ExecuteTool, in)
	if err != nil {
		t.Fatal(err)
	}
	var res contract.ExecuteToolResult
	_ = v.Get(&res)
	if res.State != capstan.OutcomeFailed || res.Decision == nil || res.Decision.Rule != "docs-frozen" {
		t.Errorf("by reference on another worker: %+v (decision %+v), want refused by docs-frozen", res, res.Decision)
	}

	missing := byRef
	missing.SourceRef = ledger.ItemRef([]byte("no such policy"))
	in.OperationID, in.Policy = "op-missing", &missing
	_, err = other.env.ExecuteActivity(other.acts.ExecuteTool, in)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != contract.ErrTypeWorkerConfig || !strings.Contains(err.Error(), "not in the ledger") {
		t.Errorf("a reference the ledger lacks: %v, want worker_misconfigured saying it is not in the ledger", err)
	}
	if s := other.sb.GitHub.Stats(); s.Requests != 0 {
		t.Errorf("GitHub handled %d requests, want 0", s.Requests)
	}
}

// A policy that does not compile on this worker fails the task's first
// model turn worker_misconfigured — as it fails ExecuteTool — with the one
// sentence naming the rule and the line, rather than offer every tool.
func TestModelTurnFailsOnAPolicyThatDoesNotCompile(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	bad := "rules:\n  - name: ok\n    tool: github_comment\n    effect: deny\n    reason: no\n  - name: broken\n    when: labels[\"env\"] ==\n    effect: allow\n"
	seed := []model.Message{{Role: model.RoleSystem, Content: "You are a test.\nTask id: T"}, {Role: model.RoleUser, Content: "go"}}
	for _, tp := range []*contract.TaskPolicy{
		{Repositories: []string{"acme/app"}, Base: "main", File: "bad.yaml", Source: bad},
		{Repositories: []string{"acme/app"}, Base: "main", File: "bad.yaml", Source: bad, SourceRef: ledger.ItemRef(contract.PolicyItem("bad.yaml", bad))},
	} {
		_, err := f.env.ExecuteActivity(f.acts.ModelTurn, contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1", AttemptID: "T/t1/a1",
			Model: "sandbox:demo", Seed: seed, Policy: tp})
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != contract.ErrTypeWorkerConfig || !strings.Contains(err.Error(), "policy file bad.yaml, line 7, rule \"broken\"") ||
			!strings.Contains(err.Error(), `"broken"`) {
			t.Errorf("ModelTurn with a policy that does not compile (ref %q): %v; want worker_misconfigured naming line 7 and rule \"broken\"", tp.SourceRef, err)
		}
	}
	if n := f.sb.Model.Stats().Requests; n != 0 {
		t.Errorf("the model got %d requests, want 0", n)
	}
}

// Every decision is recorded in the ledger once per operation: a refused
// operation has its decision (rule, reason, refused) and no operation row;
// a repeated ExecuteTool of the same operation — here under a context that
// would now allow it — gets the recorded decision, sends nothing, and is
// not counted again.
func TestDecisionIsRecordedOncePerOperation(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(d *activities.Deps) { d.Metrics = m })
	// --allow-branch capstan/x: default/own-branch lets the task's rule decide.
	tp := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", AllowBranches: []string{"capstan/x"}, File: "policy.yaml", Source: docsFrozen}
	in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T", TurnID: "T/t1", ToolCallID: "call_1", OperationID: "default:T:~s:t1:put:1",
		Tool: githubtools.NamePutFile, Arguments: f.args(t, `{"repo":"acme/app","branch":"capstan/x","path":"docs/a.md","content":"c","message":"m"}`),
		Policy: tp}
	for i, p := range []*contract.TaskPolicy{tp, {Repositories: []string{"acme/app"}, Base: "main", AllowBranches: []string{"capstan/x"}}} {
		in.Policy = p
		v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
		if err != nil {
			t.Fatal(err)
		}
		var res contract.ExecuteToolResult
		_ = v.Get(&res)
		if res.State != capstan.OutcomeFailed || res.Decision == nil || !res.Decision.Refused || res.Decision.Rule != "docs-frozen" {
			t.Errorf("call %d: %+v (decision %+v), want refused by docs-frozen", i+1, res, res.Decision)
		}
	}
	ds, err := f.ledger.Decisions(context.Background(), "T")
	if err != nil || len(ds) != 1 {
		t.Fatalf("decisions of T = %+v, %v; want one", ds, err)
	}
	if d := ds[0]; d.OperationID != in.OperationID || d.Tool != githubtools.NamePutFile || d.Effect != "deny" || d.Rule != "docs-frozen" ||
		d.Reason != "docs are frozen" || !d.Refused || d.Tenant != "default" {
		t.Errorf("recorded decision %+v, want %s denied by docs-frozen, refused", d, in.OperationID)
	}
	if _, err := f.ledger.Get(context.Background(), in.OperationID); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the refused operation has a ledger row (err %v); nothing should have been claimed", err)
	}
	if n := policyDecisions(t, m, "deny", "docs-frozen"); n != 1 {
		t.Errorf("capstan_policy_decisions_total{deny,docs-frozen} = %v, want 1", n)
	}
	if s := f.sb.GitHub.Stats(); s.Requests != 0 {
		t.Errorf("GitHub handled %d requests, want 0", s.Requests)
	}
}
