package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/taskstart"
	"github.com/capstanhq/capstan/internal/workflows"
)

// attached tells, once StartWorkflow (WorkflowIDConflictPolicy
// USE_EXISTING) returned run, whether this start made the task (false)
// or found it running with the same start input (true). A task running
// with another input is a usage error in one sentence saying what differs,
// and nothing about it has changed: a start that finds a running workflow
// changes nothing.
func attached(ctx context.Context, c client.Client, dc converter.DataConverter, run client.WorkflowRun, in workflows.AgentTaskInput, startID string) (bool, error) {
	d, err := c.DescribeWorkflow(ctx, run.GetID(), run.GetRunID())
	if err != nil {
		return false, fmt.Errorf("describe task %s: %w", in.TaskID, err)
	}
	desc := d.RawResponse
	fields := desc.GetWorkflowExecutionInfo().GetMemo().GetFields()
	var gotStart, gotHash string
	if p := fields[taskstart.MemoStartID]; p != nil {
		_ = dc.FromPayload(p, &gotStart)
	}
	if gotStart == startID {
		return false, nil
	}
	if p := fields[taskstart.MemoInputHash]; p != nil {
		_ = dc.FromPayload(p, &gotHash)
	}
	if gotHash == taskstart.InputHash(in) {
		return true, nil
	}
	// Another input, or a task started before the memo: say what differs,
	// from the input its chain started with.
	first := desc.GetWorkflowExecutionInfo().GetFirstRunId()
	old, err := startInput(ctx, c, dc, run.GetID(), first)
	if err != nil {
		return false, usagef("task %s is already running (workflow %s) and its arguments could not be read (%v); pick another --id", in.TaskID, run.GetID(), err)
	}
	if d := inputDiff(old, in); d != "" {
		return false, usagef("task %s is running with %s; pick another --id, or give the same arguments to attach to it", in.TaskID, d)
	}
	if gotHash != "" {
		return false, usagef("task %s is running with other settings than these (CAPSTAN_* of the starter); pick another --id", in.TaskID)
	}
	return true, nil
}

// startInput is the input the run runID of workflowID started with.
func startInput(ctx context.Context, c client.Client, dc converter.DataConverter, workflowID, runID string) (workflows.AgentTaskInput, error) {
	var in workflows.AgentTaskInput
	it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return in, fmt.Errorf("workflow %s has no history", workflowID)
	}
	ev, err := it.Next()
	if err != nil {
		return in, err
	}
	in, started, err := startedInput(ev, dc)
	if !started {
		return in, fmt.Errorf("workflow %s opens with %s", workflowID, ev.GetEventType())
	}
	return in, err
}

// startedInput decodes the task input of ev when ev is a run's
// WorkflowExecutionStarted event; started is false for any other event.
func startedInput(ev *historypb.HistoryEvent, dc converter.DataConverter) (in workflows.AgentTaskInput, started bool, err error) {
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil {
		return in, false, nil
	}
	return in, true, dc.FromPayloads(attrs.GetInput(), &in)
}

// inputDiff names the first argument in which the running task's input,
// was, and this start's, now, differ ("--repo a/b, not c/d"); "" when none
// of the flags' fields differ. The prompt is never printed.
func inputDiff(was, now workflows.AgentTaskInput) string {
	js := func(v any) string { b, _ := json.Marshal(v); return string(b) }
	for _, f := range []struct {
		flag, was, now string
		show           bool
	}{
		{"--prompt", was.Prompt, now.Prompt, false},
		{"--repo", was.Repo, now.Repo, true},
		{"--base", was.Base, now.Base, true},
		{"--model", was.Model, now.Model, true},
		{"--tenant", was.Tenant, now.Tenant, true},
		{"--slack", was.SlackChannel, now.SlackChannel, true},
		{"--comment", commentList(was), commentList(now), true},
		{"--fallback", strings.Join(was.Fallbacks, ","), strings.Join(now.Fallbacks, ","), true},
		{"--persistent", fmt.Sprint(was.Persistent), fmt.Sprint(now.Persistent), true},
		{"--max-turns", fmt.Sprint(was.MaxTurns), fmt.Sprint(now.MaxTurns), true},
		{"--idle-timeout", was.ModelLimits.Idle.String(), now.ModelLimits.Idle.String(), true},
		{"--max-duration", was.ModelLimits.Total.String(), now.ModelLimits.Total.String(), true},
		{"--human-timeout", was.HumanTimeout.String(), now.HumanTimeout.String(), true},
		{"--approval-timeout", was.ApprovalTimeout.String(), now.ApprovalTimeout.String(), true},
		{"--max-tokens", fmt.Sprint(was.Budget.MaxTokens), fmt.Sprint(now.Budget.MaxTokens), true},
		{"--max-cost", fmt.Sprint(was.Budget.MaxCostUSD), fmt.Sprint(now.Budget.MaxCostUSD), true},
		{"policy context (--allow-repo, --label, --require-approval or CAPSTAN_POLICY)", js(was.Policy), js(now.Policy), false},
	} {
		switch {
		case f.was == f.now:
		case !f.show:
			return "another " + f.flag
		default:
			return fmt.Sprintf("%s %s, not %s", f.flag, orNone(f.was), orNone(f.now))
		}
	}
	return ""
}

func commentList(in workflows.AgentTaskInput) string {
	var out []string
	for _, c := range in.Comments {
		out = append(out, fmt.Sprintf("%s#%d", c.Repo, c.Number))
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
