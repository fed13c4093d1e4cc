package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/workflows"
)

// scheduleView is what `schedule list` and `schedule describe` show of a
// schedule; describe fills the counts and runs.
type scheduleView struct {
	ID      string      `json:"schedule_id"`
	Spec    string      `json:"spec"`
	Overlap string      `json:"overlap,omitempty"`
	Paused  bool        `json:"paused"`
	Note    string      `json:"note,omitempty"`
	Next    []time.Time `json:"next_runs"`
	// Runs counts the tasks the schedule started; SkippedOverlap the runs
	// it skipped because the last one still ran (--overlap skip).
	Runs           int              `json:"runs"`
	SkippedOverlap int              `json:"skipped_overlap"`
	Running        []string         `json:"running_tasks"`
	Recent         []scheduledStart `json:"recent_runs"`
}

// scheduledStart is one run a schedule started, by its task id.
type scheduledStart struct {
	TaskID      string    `json:"task_id"`
	WorkflowID  string    `json:"workflow_id"`
	ScheduledAt time.Time `json:"scheduled_at"`
	StartedAt   time.Time `json:"started_at"`
}

func (v scheduleView) state() string {
	if v.Paused {
		return "paused"
	}
	return "active"
}

func (v scheduleView) next() string {
	if v.Paused || len(v.Next) == 0 {
		return "-"
	}
	return v.Next[0].UTC().Format(time.RFC3339)
}

func (a *app) scheduleDescribeCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "describe SCHEDULE_ID",
		Short: "Show a schedule: its spec, state, the tasks it started and the runs it skipped",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: a.withClient(func(ctx context.Context, c client.Client, opts client.Options, args []string) error {
			d, err := c.ScheduleClient().GetHandle(ctx, args[0]).Describe(ctx)
			if err != nil {
				return scheduleNotFound(err, args[0])
			}
			v := scheduleView{ID: args[0], Paused: d.Schedule.State.Paused, Note: d.Schedule.State.Note, Next: d.Info.NextActionTimes,
				Runs: d.Info.NumActions, SkippedOverlap: d.Info.NumActionsSkippedOverlap, Running: []string{}, Recent: []scheduledStart{}}
			if p := d.Memo.GetFields()[memoScheduleSpec]; p != nil {
				_ = dataConverter(opts).FromPayload(p, &v.Spec)
			}
			if d.Schedule.Policy != nil {
				v.Overlap = overlapName(d.Schedule.Policy.Overlap)
			}
			for _, r := range d.Info.RunningWorkflows {
				v.Running = append(v.Running, workflows.TaskIDOf(r.WorkflowID))
			}
			for _, r := range d.Info.RecentActions {
				if r.StartWorkflowResult == nil {
					continue
				}
				v.Recent = append(v.Recent, scheduledStart{TaskID: workflows.TaskIDOf(r.StartWorkflowResult.WorkflowID),
					WorkflowID: r.StartWorkflowResult.WorkflowID, ScheduledAt: r.ScheduleTime.UTC(), StartedAt: r.ActualTime.UTC()})
			}
			if asJSON {
				return printJSON(a.stdout, v)
			}
			fmt.Fprintf(a.stdout, "schedule %s: %s, %s, overlap %s\nnext run: %s\nruns: %d started, %d skipped while the last still ran\n",
				v.ID, v.Spec, v.state(), v.Overlap, v.next(), v.Runs, v.SkippedOverlap)
			if v.Note != "" {
				fmt.Fprintf(a.stdout, "note: %s\n", v.Note)
			}
			for _, r := range v.Recent {
				fmt.Fprintf(a.stdout, "  task %s  scheduled %s\n", r.TaskID, r.ScheduledAt.Format(time.RFC3339))
			}
			if len(v.Running) > 0 {
				fmt.Fprintf(a.stdout, "running: %s\n", strings.Join(v.Running, ", "))
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the schedule as JSON")
	return cmd
}

func overlapName(p enumspb.ScheduleOverlapPolicy) string {
	for name, v := range overlapPolicies {
		if v == p {
			return name
		}
	}
	return "skip" // unspecified: Temporal's default
}

func (a *app) schedulePauseCommand() *cobra.Command {
	var (
		unpause bool
		note    string
	)
	cmd := &cobra.Command{
		Use:   "pause SCHEDULE_ID [--unpause] [--note TEXT]",
		Short: "Pause a schedule (no run starts while it is paused), or with --unpause resume it",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: a.withClient(func(ctx context.Context, c client.Client, _ client.Options, args []string) error {
			h := c.ScheduleClient().GetHandle(ctx, args[0])
			verb, err := "paused", error(nil)
			if unpause {
				verb, err = "unpaused", h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: note})
			} else {
				err = h.Pause(ctx, client.SchedulePauseOptions{Note: note})
			}
			if err != nil {
				return scheduleNotFound(err, args[0])
			}
			fmt.Fprintf(a.stdout, "%s schedule %s\n", verb, args[0])
			return nil
		}),
	}
	cmd.Flags().BoolVar(&unpause, "unpause", false, "resume the schedule instead")
	cmd.Flags().StringVar(&note, "note", "", "why, shown by schedule list and describe")
	return cmd
}

func (a *app) scheduleDeleteCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "delete SCHEDULE_ID",
		Short: "Delete a schedule; the tasks it started run on",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: a.withClient(func(ctx context.Context, c client.Client, _ client.Options, args []string) error {
			if err := c.ScheduleClient().GetHandle(ctx, args[0]).Delete(ctx); err != nil {
				return scheduleNotFound(err, args[0])
			}
			fmt.Fprintf(a.stdout, "deleted schedule %s; the tasks it started run on\n", args[0])
			return nil
		}),
	}
}

func scheduleNotFound(err error, id string) error {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return usagef("no schedule %s", id)
	}
	return fmt.Errorf("schedule %s: %w", id, err)
}
