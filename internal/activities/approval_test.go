package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/model"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// A call the task requires approval for (--require-approval) in a task
// that can ask: without an answer it claims nothing and sends nothing and
// reports awaiting_approval with its summary; denied, the model reads the
// denial and nothing is sent; approved, it is sent once, and a redelivery
// of the approved call replays it.
func TestExecuteToolAwaitsApprovalThenSendsOnce(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	tp := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Tenant: "default",
		RequireApproval: []string{githubtools.NameCreatePullRequest}}
	run := func(in contract.ExecuteToolInput) contract.ExecuteToolResult {
		t.Helper()
		v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
		if err != nil {
			t.Fatal(err)
		}
		var res contract.ExecuteToolResult
		_ = v.Get(&res)
		return res
	}
	branch := run(contract.ExecuteToolInput{Tenant: "default", TaskID: "T1", TurnID: "T1/t1", ToolCallID: "call_b", OperationID: "op-branch",
		Tool: githubtools.NameCreateBranch, Arguments: f.args(t, `{"repo":"acme/app","branch":"capstan/x","from":"main"}`), Policy: tp, Approvals: true})
	file := run(contract.ExecuteToolInput{Tenant: "default", TaskID: "T1", TurnID: "T1/t1", ToolCallID: "call_f", OperationID: "op-file",
		Tool: githubtools.NamePutFile, Arguments: f.args(t, `{"repo":"acme/app","branch":"capstan/x","path":"a.md","content":"a\n","message":"a"}`), Policy: tp, Approvals: true})
	if branch.State != capstan.OutcomeSucceeded || file.State != capstan.OutcomeSucceeded {
		t.Fatalf("branch: %+v, file %+v, want both written without asking", branch, file)
	}
	before := f.sb.GitHub.Stats().Requests
	pr := contract.ExecuteToolInput{Tenant: "default", TaskID: "T1", TurnID: "T1/t2", ToolCallID: "call_pr", OperationID: "op-pr",
		Tool: githubtools.NameCreatePullRequest, Arguments: f.args(t, `{"repo":"acme/app","head":"capstan/x","base":"main","title":"t","body":"b"}`),
		Policy: tp, Approvals: true}

	res := run(pr)
	if res.State != capstan.OutcomeAwaitingApproval || res.Awaiting == nil || res.Awaiting.Summary != "pull request capstan/x → main in acme/app" ||
		res.Awaiting.Effect == "" || res.Item != "" || res.Decision == nil || res.Decision.Rule != "task/require-approval" || res.Decision.Refused {
		t.Fatalf("without an answer: %+v (awaiting %+v, decision %+v), want awaiting_approval with the summary, nothing committed", res, res.Awaiting, res.Decision)
	}
	if _, err := f.ledger.Get(context.Background(), pr.OperationID); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the ledger holds the operation that waits (err %v); nothing should have been claimed", err)
	}

	denied := pr
	denied.ToolCallID, denied.Denial = "call_pr_denied", &contract.Denial{By: "bob", Reason: "not this week"}
	res = run(denied)
	data, err := f.ledger.GetItem(context.Background(), res.Item)
	var msg model.Message
	if err != nil || json.Unmarshal(data, &msg) != nil || res.State != capstan.OutcomeDenied ||
		!strings.Contains(msg.Content, "github_create_pull_request was denied by bob: not this week. Nothing was sent") {
		t.Errorf("denied: %+v, message %s (%v); want denied, the model told bob's reason", res, data, err)
	}
	if n := f.sb.GitHub.Stats().Requests; n != before {
		t.Errorf("GitHub handled %d requests for a call awaiting approval and a denied one, want 0", n-before)
	}

	approved := pr
	approved.Approval = &contract.Approval{By: "alice"}
	for i := range 2 {
		res = run(approved)
		if res.State != capstan.OutcomeSucceeded || res.Replayed != (i == 1) || res.Decision == nil && i == 0 {
			t.Errorf("approved, execution %d: %+v, want succeeded (replayed the second time)", i+1, res)
		}
	}
	if n := f.sb.GitHub.Stats().PullRequestsCreated; n != 1 {
		t.Errorf("pull requests created = %d, want 1", n)
	}

	// A policy file's require_approval effect waits the same way.
	fp := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Tenant: "default", File: "policy.yaml",
		Source: "rules:\n  - name: prs-need-a-person\n    tool: github_create_pull_request\n    effect: require_approval\n"}
	byFile := pr
	byFile.OperationID, byFile.Policy = "op-pr-file", fp
	if res = run(byFile); res.State != capstan.OutcomeAwaitingApproval || res.Decision == nil || res.Decision.Rule != "prs-need-a-person" {
		t.Errorf("a policy file's require_approval: %+v (decision %+v), want awaiting_approval by prs-need-a-person", res, res.Decision)
	}
}
