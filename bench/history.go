package main

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/proto"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/workflows"
)

// historyRow is the history of one task of the sandbox script turns-N: N-1
// turns that each read the README through a read-only tool, and a final
// answer. Bytes are proto.Size of every event, summed over every run of the
// task (a long task continues as new).
type historyRow struct {
	kind   kind
	turns  int
	bytes  int
	events int
	// carried is the bytes of the events that carry the task's state
	// whole: each run's start (its checkpoint), its continue-as-new and the
	// completion (the result).
	carried int
	byType  map[string]int // events by type
	runs    int
	took    time.Duration
	err     error
}

// perTurn is the history's bytes over its turns.
func (h historyRow) perTurn() float64 { return float64(h.bytes) / float64(h.turns) }

// runHistory runs one turns-N task to its end on the pool's queue and
// measures its history.
func (e *env) runHistory(ctx context.Context, k kind, queue string, turns int) historyRow {
	row := historyRow{kind: k, turns: turns}
	id := e.next(fmt.Sprintf("history-%s-%d", k, turns))
	script := fmt.Sprintf("openai:turns-%d", turns)
	t0 := time.Now()
	var run client.WorkflowRun
	var err error
	switch k {
	case kindCapstan:
		run, err = e.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.WorkflowID(id), TaskQueue: queue},
			workflows.AgentTask, workflows.AgentTaskInput{
				TaskID: id, Tenant: config.DefaultTenant, Logic: workflows.CurrentLogic, Prompt: "Read the README again and again.", Repo: demoRepo,
				Base: config.DefaultBaseBranch, Model: script, MaxTurns: turns, ModelLimits: model.Limits(config.DefaultModelLimits),
				// The bench measures history, not spend: a 1000-turn task
				// re-sends its growing transcript every turn and would pass
				// the default token budget (CAPSTAN_MAX_TOKENS_PER_TASK)
				// near turn 180.
				Budget: contract.Budget{MaxTokens: 1 << 40},
			})
	default:
		run, err = e.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "bare-" + id, TaskQueue: queue},
			BareTask, BareInput{TaskID: id, Prompt: "Read the README again and again.", Repo: demoRepo,
				Base: config.DefaultBaseBranch, Model: script, MaxTurns: turns})
	}
	if err != nil {
		row.err = err
		return row
	}
	stopWatching := e.watchTurns(ctx, k, run.GetID(), turns)
	row.err = checkTurns(ctx, k, run, turns)
	stopWatching()
	row.took = time.Since(t0)
	if row.err != nil {
		return row
	}
	row.err = e.historySize(ctx, run.GetID(), &row)
	return row
}

// checkTurns waits for a turns-N task and wants it completed in N turns.
func checkTurns(ctx context.Context, k kind, run client.WorkflowRun, turns int) error {
	got := 0
	switch k {
	case kindCapstan:
		var res workflows.TaskResult
		if err := run.Get(ctx, &res); err != nil {
			return err
		}
		if res.Status != workflows.StatusCompleted {
			return fmt.Errorf("task %s: %s: %s", res.TaskID, res.Status, res.Message)
		}
		got = len(res.Turns)
	default:
		var res BareResult
		if err := run.Get(ctx, &res); err != nil {
			return err
		}
		got = res.Turns
	}
	if got != turns {
		return fmt.Errorf("%s ran %d turns, want %d", run.GetID(), got, turns)
	}
	return nil
}

// watchTurns prints a long capstan task's progress (its status query) every
// 20 s until stopped.
func (e *env) watchTurns(ctx context.Context, k kind, workflowID string, turns int) func() {
	if k != kindCapstan || turns < 200 {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(20 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				v, err := e.client.QueryWorkflow(ctx, workflowID, "", workflows.QueryStatus)
				var st workflows.TaskResult
				if err == nil && v.Get(&st) == nil {
					progress("  %s: turn %d of %d", workflowID, len(st.Turns), turns)
				}
			}
		}
	}()
	return func() { close(done) }
}

// historySize measures the history of every run of a workflow, following
// the chain of continue-as-new back from the latest run, into row.
func (e *env) historySize(ctx context.Context, workflowID string, row *historyRow) error {
	row.byType = map[string]int{}
	runID := ""
	for {
		h, err := e.fetchHistory(ctx, workflowID, runID)
		if err != nil {
			return err
		}
		row.bytes += proto.Size(h)
		row.events += len(h.GetEvents())
		row.runs++
		for _, ev := range h.GetEvents() {
			row.byType[ev.GetEventType().String()]++
			switch ev.GetEventType() {
			case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW,
				enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
				row.carried += proto.Size(ev)
			}
		}
		if len(h.GetEvents()) == 0 {
			return nil
		}
		runID = h.GetEvents()[0].GetWorkflowExecutionStartedEventAttributes().GetContinuedExecutionRunId()
		if runID == "" {
			return nil
		}
	}
}

func (e *env) fetchHistory(ctx context.Context, workflowID, runID string) (*historypb.History, error) {
	it := e.client.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("read the history of %s: %w", workflowID, err)
		}
		h.Events = append(h.Events, ev)
	}
	return h, nil
}

// text is the row for a progress line.
func (h historyRow) text() string {
	if h.err != nil {
		return "failed: " + h.err.Error()
	}
	return fmt.Sprintf("%d bytes, %d events, %d run(s), %.0f bytes/turn, in %s",
		h.bytes, h.events, h.runs, h.perTurn(), h.took.Round(time.Millisecond))
}
