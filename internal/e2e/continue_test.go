package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestContinueAsNewCarriesTheCheckpoint runs a long task on a server that
// suggests continue-as-new early, and checks that the task goes on across
// runs with its transcript and records intact.
func TestContinueAsNewCarriesTheCheckpoint(t *testing.T) {
	t.Parallel()
	srv, err := testenv.StartDevServer(context.Background(), nil,
		"--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=60")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	sb := startSandbox(t)
	env := onServer(endpointEnv(t, "e2e-continue", sb), srv.FrontendHostPort())
	startWorker(t, env)

	const turns = 12
	id := fmt.Sprintf("e2e-continue-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run", "--prompt", "Read the README many times.", "--repo", "capstan-sandbox/demo",
		"--model", fmt.Sprintf("openai:turns-%d", turns), "--id", id, "--max-turns", "20", "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if res.Status != workflows.StatusCompleted || len(res.Turns) != turns || len(res.Operations) != turns-1 {
		t.Fatalf("result: status %s, %d turns, %d operations; want completed, %d turns, %d operations",
			res.Status, len(res.Turns), len(res.Operations), turns, turns-1)
	}
	// Every turn, in every run, is keyed by the chain's scope: the
	// namespace and the first run's id, which continue-as-new keeps.
	desc, err := srv.Client().DescribeWorkflow(context.Background(), workflows.WorkflowID(id), "")
	if err != nil {
		t.Fatal(err)
	}
	scope := workflows.ChainScope("default", desc.RawResponse.GetWorkflowExecutionInfo().GetFirstRunId())
	for i, turn := range res.Turns {
		if want := fmt.Sprintf("%s/%s/t%d", id, scope, i+1); turn.TurnID != want {
			t.Errorf("turn %d id = %s, want %s", i, turn.TurnID, want)
		}
	}
	// The model saw the whole conversation in the last turn: the transcript
	// crossed the runs by reference.
	if got := sb.Model.Stats().ScriptRequests[fmt.Sprintf("turns-%d", turns)]; got != turns {
		t.Errorf("model requests = %d, want %d", got, turns)
	}
	var last struct {
		Messages []struct{ Role string } `json:"messages"`
	}
	if err := json.Unmarshal(sb.Model.LastRequest(), &last); err != nil {
		t.Fatal(err)
	}
	if want := 2 + 2*(turns-1); len(last.Messages) != want {
		t.Errorf("the last request carried %d messages, want %d (system, user, and every assistant and tool item)", len(last.Messages), want)
	}
	list, err := srv.Client().ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = '%s'", workflows.WorkflowID(id)),
	})
	if err != nil {
		t.Fatal(err)
	}
	continued := 0
	for _, e := range list.GetExecutions() {
		if e.GetStatus() == enums.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
			continued++
		}
	}
	if continued == 0 {
		t.Fatalf("the task never continued as new (%d runs listed); the test proves nothing", len(list.GetExecutions()))
	}
	t.Logf("%d turns over %d runs", turns, continued+1)

	// The last run names the first; the first run's history ends in the
	// continue-as-new that carried the checkpoint.
	lastRun := fetchRunHistory(t, srv.Client(), workflows.WorkflowID(id), "")
	firstRunID := lastRun.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetFirstExecutionRunId()
	first := fetchRunHistory(t, srv.Client(), workflows.WorkflowID(id), firstRunID)
	if evs := first.GetEvents(); firstRunID == "" || evs[len(evs)-1].GetEventType() != enums.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW {
		t.Fatalf("the first run %q does not end in a continue-as-new", firstRunID)
	}
	recordRunHistory(t, srv.Client(), "continue-as-new-run1", workflows.WorkflowID(id), firstRunID)
	recordRunHistory(t, srv.Client(), "continue-as-new-last", workflows.WorkflowID(id), "")
}
