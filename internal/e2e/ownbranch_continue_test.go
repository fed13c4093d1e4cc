package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/testenv"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestWritesOntoItsBranchAcrossContinueAsNew: a branch the task created in
// one run is its own in the next (default/own-branch reads the ledger by
// the chain's scope, which continue-as-new keeps). The demo script creates
// capstan/hello-<id> in its first turn and writes onto it in its second; a
// server that suggests continue-as-new after a few events puts the second
// turn in a later run, and the write is still allowed and made.
func TestWritesOntoItsBranchAcrossContinueAsNew(t *testing.T) {
	t.Parallel()
	srv, err := testenv.StartDevServer(context.Background(), nil,
		"--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=5")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	sb := startSandbox(t)
	env := onServer(endpointEnv(t, "e2e-ownbranch", sb), srv.FrontendHostPort())
	startWorker(t, env)

	id := fmt.Sprintf("e2e-ownbranch-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run", "--prompt", "Add HELLO.md.", "--repo", "capstan-sandbox/demo",
		"--model", "openai:demo", "--id", id, "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("status %s (%s), want completed", res.Status, res.Message)
	}
	states := map[string]capstan.Outcome{}
	for _, op := range res.Operations {
		states[op.Tool] = op.State
		if op.PolicyRule != "" {
			t.Errorf("%s refused by %s: %s", op.Tool, op.PolicyRule, op.Reason)
		}
	}
	if states[githubtools.NameCreateBranch] != capstan.OutcomeSucceeded || states[githubtools.NamePutFile] != capstan.OutcomeSucceeded {
		t.Fatalf("operations %+v, want the branch created and the file written", res.Operations)
	}
	if s := sb.GitHub.Stats(); s.BranchesCreated != 1 || s.FilesWritten != 1 {
		t.Errorf("GitHub saw %d branches created and %d files written, want 1 and 1", s.BranchesCreated, s.FilesWritten)
	}

	// The first run created the branch and ended in a continue-as-new
	// before the write: the write was decided in a later run.
	last := fetchRunHistory(t, srv.Client(), workflows.WorkflowID(id), "")
	firstRunID := last.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetFirstExecutionRunId()
	first := fetchRunHistory(t, srv.Client(), workflows.WorkflowID(id), firstRunID)
	tools := 0
	for _, e := range first.GetEvents() {
		if e.GetEventType() == enums.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED &&
			e.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName() == "ExecuteTool" {
			tools++
		}
	}
	if evs := first.GetEvents(); firstRunID == "" || evs[len(evs)-1].GetEventType() != enums.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW || tools != 1 {
		t.Fatalf("the first run %q ran %d tool calls and did not end in a continue-as-new after the first: the test proves nothing", firstRunID, tools)
	}
}
