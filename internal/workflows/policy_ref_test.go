package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/workflows"
)

// policyFile2KB is a policy file of about 2 KB: twelve rules.
func policyFile2KB() string {
	var b strings.Builder
	b.WriteString("rules:\n")
	for i := 0; b.Len() < 2000; i++ {
		fmt.Fprintf(&b, "  - name: rule-%02d\n    tool: github_put_file\n    path: docs/part-%02d/**\n    when: labels[?\"env\"].orValue(\"\") == \"prod-%02d\"\n    effect: deny\n    reason: part %02d is frozen in prod\n", i, i, i, i)
	}
	return b.String()
}

// inputBytes runs a task whose model writes one file a turn for calls
// turns, then answers, and returns the encoded bytes of every activity
// input (what history records of them), and the policy contexts
// ModelTurn and ExecuteTool were given. byRef says whether the run takes
// changePolicyByReference.
func inputBytes(t *testing.T, tp *contract.TaskPolicy, calls int, byRef bool) (int, []*contract.TaskPolicy, []*contract.TaskPolicy) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterActivity(&activities.Activities{})
	if !byRef {
		env.OnGetVersion("policy-by-reference", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
		env.OnGetVersion("all-changes-v13", workflow.DefaultVersion, 1).Return(workflow.DefaultVersion) // a task started before the v13 marker
	}
	var mu sync.Mutex
	total := 0
	var turnPolicies, toolPolicies []*contract.TaskPolicy
	count := func(in any) {
		b, _ := json.Marshal(in)
		mu.Lock()
		total += len(b)
		mu.Unlock()
	}
	put := contract.ToolCallRef{ID: "call", Name: "github_put_file", Class: "idempotent", Arguments: "sha256:put", Summary: "put_file"}
	turns := 0
	env.OnActivity(a.ModelTurn, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ModelTurnInput) (contract.ModelTurnResult, error) {
			count(in)
			turns++
			turnPolicies = append(turnPolicies, in.Policy)
			if turns > calls {
				return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: "sha256:99", Text: "done"}, nil
			}
			return contract.ModelTurnResult{AttemptID: in.AttemptID, Transcript: fmt.Sprintf("sha256:1%d", turns), ToolCalls: []contract.ToolCallRef{put}}, nil
		})
	env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
		func(_ context.Context, in contract.ExecuteToolInput) (contract.ExecuteToolResult, error) {
			count(in)
			mu.Lock()
			toolPolicies = append(toolPolicies, in.Policy)
			mu.Unlock()
			return contract.ExecuteToolResult{OperationID: in.OperationID, State: capstan.OutcomeSucceeded, Item: "sha256:20",
				Decision: &contract.PolicyDecision{Effect: "allow", Rule: "default/allow", Reason: "allowed"}}, nil
		})
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "R1", Tenant: "default", Prompt: "p", Model: "openai:m",
		Repo: "acme/app", Base: "main", Policy: tp, MaxTurns: calls + 2})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	return total, turnPolicies, toolPolicies
}

// Under changePolicyByReference the policy file's text travels in the
// first turn's ModelTurn input only; every other input names it by its
// reference, the ledger item of its name and text. A chain that did not
// take the change sends the text in every input, as before. The test logs
// the bytes of the inputs of a task with a 2 KB file and 10 tool calls
// both ways.
func TestPolicyTextTravelsByReference(t *testing.T) {
	t.Parallel()
	src := policyFile2KB()
	mk := func() *contract.TaskPolicy {
		return &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Tenant: "default", File: "policy.yaml", Source: src}
	}
	const calls = 10
	after, turnPs, toolPs := inputBytes(t, mk(), calls, true)
	ref := ledger.ItemRef(contract.PolicyItem("policy.yaml", src))
	if len(toolPs) != calls || len(turnPs) != calls+1 {
		t.Fatalf("%d ModelTurn and %d ExecuteTool inputs, want %d and %d", len(turnPs), len(toolPs), calls+1, calls)
	}
	if turnPs[0].Source != src || turnPs[0].SourceRef != ref {
		t.Errorf("first turn's policy: source %d bytes, ref %q; want the text and %q", len(turnPs[0].Source), turnPs[0].SourceRef, ref)
	}
	for i, p := range append(turnPs[1:], toolPs...) {
		if p == nil || p.Source != contract.PolicyPlaceholder(ref) || p.SourceRef != ref || p.File != "policy.yaml" {
			t.Errorf("input %d: policy %+v, want the reference %s and the placeholder instead of the text", i+1, p, ref)
		}
	}
	before, _, oldToolPs := inputBytes(t, mk(), calls, false)
	for i, p := range oldToolPs {
		if p.Source != src || p.SourceRef != "" {
			t.Errorf("old chain, ExecuteTool %d: source %d bytes, ref %q; want the text, no ref", i+1, len(p.Source), p.SourceRef)
		}
	}
	t.Logf("activity inputs of a task with a %d-byte policy file and %d tool calls: %d bytes with the text in every input, %d by reference (%.1f%%)",
		len(src), calls, before, after, 100*float64(after)/float64(before))
	if after >= before-calls*len(src) {
		t.Errorf("by reference the inputs take %d bytes, by text %d: want at least %d fewer", after, before, calls*len(src))
	}
}
