package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger/sqlite"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestResetRepeatsNoEffect resets a completed task with the pinned
// `temporal workflow reset`, once to its first workflow task and once to the
// workflow task that took in the pull request comment's result, and checks
// that the reset runs complete without repeating anything (docs/design.md
// §5.6): committed turns are not sampled again (§4.3), the re-declared calls
// get the ids they had (a business key, or the call's position in its
// committed turn, §5.2) and the ledger replays them, and the delivery
// replays its acknowledgement. The sandbox's counters, the model's request
// count and the ledger's rows are exactly as the original run left them.
func TestResetRepeatsNoEffect(t *testing.T) {
	t.Parallel()
	cli, err := testenv.TemporalCLI()
	if err != nil {
		t.Fatal(err)
	}
	sb := startSandbox(t)
	env := endpointEnv(t, "e2e-reset", sb)
	startWorker(t, env)

	taskID := fmt.Sprintf("e2e-reset-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run",
		"--prompt", "Add a HELLO.md greeting, open a pull request, ask for review on it and tell the team.",
		"--repo", "capstan-sandbox/demo", "--base", "main", "--slack", "#x",
		"--model", "openai:review", "--id", taskID, "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("starter run exited %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	orig := decodeResult(t, r)
	wantTools := []string{"github_create_branch", "github_put_file", "github_create_pull_request", "github_comment"}
	if orig.Status != workflows.StatusCompleted || len(orig.Turns) != 5 || !slices.Equal(toolsOf(orig), wantTools) {
		t.Fatalf("original run: status %s, %d turns, tools %v; want completed, 5 turns, tools %v", orig.Status, len(orig.Turns), toolsOf(orig), wantTools)
	}
	for i, op := range orig.Operations {
		if op.State != capstan.OutcomeSucceeded || op.Replayed || op.ExternalID == "" {
			t.Fatalf("original operation %d = %+v, want SUCCEEDED, sent (not replayed), with an external id", i, op)
		}
	}
	if len(orig.Deliveries) != 1 || orig.Deliveries[0].State != capstan.OutcomeSucceeded {
		t.Fatalf("original deliveries = %+v, want one succeeded", orig.Deliveries)
	}
	// The comment has no business key: its id is its position in turn 4,
	// after the chain's scope (its namespace and first run id), which the
	// reset runs below keep: checkResetRun wants every id unchanged.
	origRun := currentRunID(t, orig.WorkflowID)
	if want := "default:" + taskID + ":" + workflows.ChainScope("default", origRun) + ":t4:github_comment:1"; orig.Operations[3].OperationID != want {
		t.Errorf("comment operation id = %q, want %q", orig.Operations[3].OperationID, want)
	}

	before := countEffects(sb)
	t.Logf("counters after the original run: %s", before)
	if want := (effectCounts{Branches: 1, FilesWritten: 1, PullRequests: 1, Comments: 1, SlackMessages: 1, ModelRequests: 5}); before.effects() != want.effects() {
		t.Fatalf("counters after the original run = %s, want %s", before, want)
	}
	rowsBefore := ledgerRows(t, env, taskID)
	if len(rowsBefore) != 5 {
		t.Fatalf("ledger rows of %s = %d, want 5 (4 tool calls and the delivery)", taskID, len(rowsBefore))
	}

	// (1) Back to the first workflow task: the whole task runs again.
	run1 := resetTask(t, cli, orig.WorkflowID, origRun, "--type", "FirstWorkflowTask")
	res1 := waitRun(t, orig.WorkflowID, run1)
	after1 := countEffects(sb)
	t.Logf("counters after the reset to the first workflow task: %s", after1)
	checkResetRun(t, "reset to FirstWorkflowTask", orig, res1, before, after1)
	for i, op := range res1.Operations {
		if !op.Replayed {
			t.Errorf("reset to FirstWorkflowTask: operation %d (%s) was not replayed from the ledger: %+v", i, op.Tool, op)
		}
	}
	ran1 := activityResults(t, orig.WorkflowID, run1)
	if n := len(ran1["ModelTurn"]); n != 5 {
		t.Errorf("reset to FirstWorkflowTask ran %d ModelTurn activities, want all 5 turns again", n)
	}
	if n := len(ran1["ExecuteTool"]); n != 4 {
		t.Errorf("reset to FirstWorkflowTask ran %d ExecuteTool activities, want all 4 calls again", n)
	}
	checkReplayedActivities(t, "reset to FirstWorkflowTask", ran1)
	if got := ledgerRows(t, env, taskID); !reflect.DeepEqual(got, rowsBefore) {
		t.Errorf("reset to FirstWorkflowTask changed the ledger:\nbefore %+v\nafter  %+v", rowsBefore, got)
	}

	// (2) Back to the workflow task that took in the comment's result: the
	// last turn and the delivery run again.
	afterComment := eventAfterComment(t, orig.WorkflowID, origRun)
	run2 := resetTask(t, cli, orig.WorkflowID, origRun, "--event-id", strconv.FormatInt(afterComment, 10))
	res2 := waitRun(t, orig.WorkflowID, run2)
	after2 := countEffects(sb)
	t.Logf("counters after the reset to event %d (after the comment): %s", afterComment, after2)
	checkResetRun(t, fmt.Sprintf("reset to event %d", afterComment), orig, res2, before, after2)
	ran2 := activityResults(t, orig.WorkflowID, run2)
	if n, m := len(ran2["ModelTurn"]), len(ran2["Deliver"]); n != 1 || m != 1 {
		t.Errorf("reset to event %d ran %d ModelTurn and %d Deliver activities, want the last turn and the delivery once each", afterComment, n, m)
	}
	checkReplayedActivities(t, fmt.Sprintf("reset to event %d", afterComment), ran2)
	if got := ledgerRows(t, env, taskID); !reflect.DeepEqual(got, rowsBefore) {
		t.Errorf("reset to event %d changed the ledger:\nbefore %+v\nafter  %+v", afterComment, rowsBefore, got)
	}

	// (3) The ledger last saw the original run commit a turn (the reset
	// runs replayed theirs). With that run gone, the chain is still
	// Temporal's through its current run: gc keeps every row.
	deleteRun(t, temporal, "default", orig.WorkflowID, origRun)
	gc := runStarter(t, env, "gc", "--older-than", "0s")
	t.Logf("starter gc --older-than 0s, the original run deleted:\n%s", gc.stdout)
	if gc.code != 0 || !strings.HasPrefix(gc.stdout, "deleted 0 task(s): 0 operation(s), 0 turn(s), 0 item(s), 0 bytes\nkept 1 of 1 ") {
		t.Errorf("gc with the chain's reset run alive exited %d:\n%s%s\nwant nothing deleted and the task kept", gc.code, gc.stdout, gc.stderr)
	}
	if got := ledgerRows(t, env, taskID); !reflect.DeepEqual(got, rowsBefore) {
		t.Errorf("gc changed the ledger of a task Temporal still has:\nbefore %+v\nafter  %+v", rowsBefore, got)
	}
}

func toolsOf(res workflows.TaskResult) []string {
	var out []string
	for _, op := range res.Operations {
		out = append(out, op.Tool)
	}
	return out
}

// checkResetRun checks what every reset run must show: it completed with
// the original answer, the same operations at the same external ids, the
// delivery acknowledged at the same message, and no effect repeated.
func checkResetRun(t *testing.T, what string, orig, got workflows.TaskResult, before, after effectCounts) {
	t.Helper()
	if got.Status != workflows.StatusCompleted {
		t.Fatalf("%s: status %s (%s: %s), want completed", what, got.Status, got.FailureCode, got.Message)
	}
	if after != before {
		t.Errorf("%s: counters went from %s to %s, want them unchanged", what, before, after)
	}
	if got.FinalText != orig.FinalText {
		t.Errorf("%s: final text %q, want the original %q", what, got.FinalText, orig.FinalText)
	}
	if len(got.Operations) != len(orig.Operations) {
		t.Fatalf("%s: operations %+v, want the original %+v", what, got.Operations, orig.Operations)
	}
	for i, op := range got.Operations {
		o := orig.Operations[i]
		if op.OperationID != o.OperationID || op.Tool != o.Tool || op.State != capstan.OutcomeSucceeded || op.ExternalID != o.ExternalID {
			t.Errorf("%s: operation %d = %+v, want %s %s SUCCEEDED at %s", what, i, op, o.Tool, o.OperationID, o.ExternalID)
		}
	}
	if len(got.Deliveries) != 1 {
		t.Fatalf("%s: deliveries %+v, want one", what, got.Deliveries)
	}
	if d, o := got.Deliveries[0], orig.Deliveries[0]; d.State != capstan.OutcomeSucceeded || d.OperationID != o.OperationID || d.ExternalID != o.ExternalID {
		t.Errorf("%s: delivery %+v, want succeeded as %s at %s", what, d, o.OperationID, o.ExternalID)
	}
}

// checkReplayedActivities: every model turn a reset run asked for was
// returned from the ledger's committed turns, and every tool call and
// delivery from the ledger's recorded result.
func checkReplayedActivities(t *testing.T, what string, ran map[string][]json.RawMessage) {
	t.Helper()
	for typ, results := range ran {
		for i, raw := range results {
			var out struct{ Replayed bool }
			if err := json.Unmarshal(raw, &out); err != nil {
				t.Fatalf("%s: decode %s result: %v", what, typ, err)
			}
			if !out.Replayed {
				t.Errorf("%s: %s activity %d was not replayed: %s", what, typ, i+1, raw)
			}
		}
	}
}

// effectCounts are what the sandbox saw: the effects and every request.
type effectCounts struct {
	Branches, FilesWritten, PullRequests, Comments int64
	SlackMessages                                  int64
	ModelRequests                                  int64
	GitHubRequests, SlackRequests                  int64
}

// effects are the counts of effects alone.
func (c effectCounts) effects() [6]int64 {
	return [6]int64{c.Branches, c.FilesWritten, c.PullRequests, c.Comments, c.SlackMessages, c.ModelRequests}
}

func (c effectCounts) String() string {
	return fmt.Sprintf("github %d branch(es), %d file write(s), %d pull request(s), %d comment(s) in %d requests; "+
		"slack %d message(s) in %d requests; model %d request(s)",
		c.Branches, c.FilesWritten, c.PullRequests, c.Comments, c.GitHubRequests, c.SlackMessages, c.SlackRequests, c.ModelRequests)
}

func countEffects(sb *sandbox.Sandbox) effectCounts {
	gh, sl, m := sb.GitHub.Stats(), sb.Slack.Stats(), sb.Model.Stats()
	return effectCounts{
		Branches: gh.BranchesCreated, FilesWritten: gh.FilesWritten, PullRequests: gh.PullRequestsCreated, Comments: gh.CommentsCreated,
		SlackMessages: sl.MessagesPosted, ModelRequests: m.Requests,
		GitHubRequests: gh.Requests, SlackRequests: sl.Requests,
	}
}

// ledgerRow is what a reset must leave as it was: a replayed claim neither
// takes a new fence nor counts an attempt.
type ledgerRow struct {
	ID         string
	State      capstan.Outcome
	Fence      int64
	Attempts   int
	ExternalID string
	UpdatedAt  time.Time
}

// ledgerRows reads the task's operations from the worker's SQLite ledger,
// opened beside the worker (WAL allows it).
func ledgerRows(t *testing.T, env []string, taskID string) []ledgerRow {
	t.Helper()
	var path string
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "CAPSTAN_LEDGER_DSN=sqlite://"); ok {
			path = p
		}
	}
	if !filepath.IsAbs(path) {
		t.Fatalf("the worker's ledger is not an absolute sqlite path: %q", path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ops, err := st.ListByTask(ctx, taskID)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([]ledgerRow, 0, len(ops))
	for _, op := range ops {
		rows = append(rows, ledgerRow{ID: op.ID, State: op.State, Fence: op.Fence, Attempts: op.AttemptCount,
			ExternalID: op.ExternalID, UpdatedAt: op.UpdatedAt.UTC()})
	}
	slices.SortFunc(rows, func(a, b ledgerRow) int { return strings.Compare(a.ID, b.ID) })
	return rows
}

func currentRunID(t *testing.T, workflowID string) string {
	t.Helper()
	desc, err := describe(context.Background(), workflowID)
	if err != nil {
		t.Fatal(err)
	}
	return desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// resetTask resets one run of the workflow with the pinned CLI and returns
// the id of the run the reset started, checked against the server: it is
// the workflow's current run, and its history says it is a reset of runID.
func resetTask(t *testing.T, cli, workflowID, runID string, how ...string) string {
	t.Helper()
	args := append([]string{"workflow", "reset", "--address", devServerAddr, "--namespace", "default",
		"--workflow-id", workflowID, "--run-id", runID, "--reason", "e2e: a reset repeats no effect",
		"--output", "json"}, how...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cli, args...)
	cmd.Env = []string{"HOME=" + t.TempDir()}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("temporal %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	var printed struct {
		RunID string `json:"runId"`
	}
	if err := json.Unmarshal(out, &printed); err != nil || printed.RunID == "" {
		t.Fatalf("temporal workflow reset printed no run id (%v): %s", err, out)
	}
	if cur := currentRunID(t, workflowID); cur != printed.RunID {
		t.Fatalf("after the reset the current run is %s, but the CLI printed %s", cur, printed.RunID)
	}
	var resetOf string
	for _, ev := range fetchRunHistory(t, temporal, workflowID, printed.RunID).GetEvents() {
		if a := ev.GetWorkflowTaskFailedEventAttributes(); a != nil && a.GetCause() == enums.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW {
			resetOf = a.GetBaseRunId()
		}
	}
	if resetOf != runID {
		t.Fatalf("run %s is not a reset of %s (its reset names base run %q)", printed.RunID, runID, resetOf)
	}
	t.Logf("temporal workflow reset %s printed %s", strings.Join(how, " "), strings.TrimSpace(string(out)))
	return printed.RunID
}

// waitRun waits for one run of the workflow to close and returns its result.
func waitRun(t *testing.T, workflowID, runID string) workflows.TaskResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var res workflows.TaskResult
	if err := temporal.GetWorkflow(ctx, workflowID, runID).Get(ctx, &res); err != nil {
		t.Fatalf("run %s of %s: %v", runID, workflowID, err)
	}
	return res
}

// activityResults returns, by activity type, the results of the activities a
// run completed after its reset point (those before it are copied from the
// base run and did not run again).
func activityResults(t *testing.T, workflowID, runID string) map[string][]json.RawMessage {
	t.Helper()
	events := fetchRunHistory(t, temporal, workflowID, runID).GetEvents()
	resetAt := slices.IndexFunc(events, func(ev *historypb.HistoryEvent) bool {
		a := ev.GetWorkflowTaskFailedEventAttributes()
		return a != nil && a.GetCause() == enums.WORKFLOW_TASK_FAILED_CAUSE_RESET_WORKFLOW
	})
	if resetAt < 0 {
		t.Fatalf("run %s has no reset in its history", runID)
	}
	types := map[int64]string{}
	out := map[string][]json.RawMessage{}
	for _, ev := range events[resetAt:] {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			types[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil {
			var raw json.RawMessage
			if err := converter.GetDefaultDataConverter().FromPayloads(a.GetResult(), &raw); err != nil {
				t.Fatalf("decode the result of event %d: %v", ev.GetEventId(), err)
			}
			typ := types[a.GetScheduledEventId()]
			out[typ] = append(out[typ], raw)
		}
	}
	return out
}

// eventAfterComment returns the WorkflowTaskCompleted event that follows
// the completion of the ExecuteTool activity that posted the comment.
func eventAfterComment(t *testing.T, workflowID, runID string) int64 {
	t.Helper()
	commentScheduled, commentDone := int64(0), false
	for _, ev := range fetchRunHistory(t, temporal, workflowID, runID).GetEvents() {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "ExecuteTool" {
			var in contract.ExecuteToolInput
			if err := converter.GetDefaultDataConverter().FromPayloads(a.GetInput(), &in); err != nil {
				t.Fatalf("decode the input of event %d: %v", ev.GetEventId(), err)
			}
			if in.Tool == "github_comment" {
				commentScheduled = ev.GetEventId()
			}
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && commentScheduled != 0 && a.GetScheduledEventId() == commentScheduled {
			commentDone = true
		}
		if commentDone && ev.GetEventType() == enums.EVENT_TYPE_WORKFLOW_TASK_COMPLETED {
			return ev.GetEventId()
		}
	}
	t.Fatalf("run %s has no workflow task completed after the comment's ExecuteTool", runID)
	return 0
}
