package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/taskstart"
	"github.com/capstanhq/capstan/internal/workflows"
)

// memoScheduleSpec is the schedule's memo field holding its spec as given
// (--cron EXPR, --every D), which `schedule list` shows: the server keeps
// a cron expression only in its structured form.
const memoScheduleSpec = "capstan_spec"

// overlapPolicies are --overlap's values: what a schedule does when a run
// is due while its last one still runs (Temporal's overlap policies).
var overlapPolicies = map[string]enumspb.ScheduleOverlapPolicy{
	"skip":            enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
	"buffer-one":      enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE,
	"buffer-all":      enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL,
	"cancel-other":    enumspb.SCHEDULE_OVERLAP_POLICY_CANCEL_OTHER,
	"terminate-other": enumspb.SCHEDULE_OVERLAP_POLICY_TERMINATE_OTHER,
	"allow-all":       enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL,
}

// maxScheduleID leaves room in a task id (at most 100) for the run's
// scheduled time, "-20261202T160500Z".
const maxScheduleID = 83

func (a *app) scheduleCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule (create | list | describe | pause | delete)",
		Short: "Run tasks on a Temporal Schedule: every run is a task of its own",
	}
	cmd.AddCommand(a.scheduleCreateCommand(), a.scheduleListCommand(), a.scheduleDescribeCommand(),
		a.schedulePauseCommand(), a.scheduleDeleteCommand())
	return cmd
}

func (a *app) scheduleCreateCommand() *cobra.Command {
	var (
		f             runFlags
		cron, overlap string
		every         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create --id SCHEDULE_ID (--cron EXPR | --every D) --prompt TEXT [flags]",
		Short: "Create a schedule that starts a task at each time of its spec",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts, err := a.scheduleOptions(f, cron, every, overlap)
			if err != nil {
				return err
			}
			return a.withClient(func(ctx context.Context, c client.Client, _ client.Options, _ []string) error {
				_, err := c.ScheduleClient().Create(ctx, opts)
				var invalid *serviceerror.InvalidArgument
				switch {
				case errors.Is(err, temporal.ErrScheduleAlreadyRunning):
					return usagef("schedule %s already exists; delete it first or pick another --id", opts.ID)
				case errors.As(err, &invalid) && cron != "":
					return usagef("--cron %q is not a cron expression Temporal reads (%s)", cron, strings.TrimSuffix(invalid.Message, "."))
				case err != nil:
					return fmt.Errorf("create schedule %s: %w", opts.ID, err)
				}
				fmt.Fprintf(a.stdout, "created schedule %s (%s, overlap %s); each run is task %s-<scheduled time, YYYYMMDDTHHMMSSZ>\n",
					opts.ID, specText(cron, every), overlap, opts.ID)
				return nil
			})(cmd, nil)
		},
	}
	fl := cmd.Flags()
	f.register(fl)
	fl.StringVar(&f.id, "id", "", "schedule id (required); each run is task <id>-<scheduled time>, e.g. nightly-20261202T160500Z")
	fl.StringVar(&cron, "cron", "", `when to run, a cron expression as Temporal reads it ("0 9 * * 1-5", "@daily"; UTC)`)
	fl.DurationVar(&every, "every", 0, "run at every multiple of this interval since the epoch (e.g. 1h, 5s)")
	fl.StringVar(&overlap, "overlap", "skip", "when a run is due while the last one still runs: skip, buffer-one, buffer-all, cancel-other, terminate-other or allow-all")
	return cmd
}

// scheduleOptions validates create's flags; every error is a usage error
// and nothing has been created.
func (a *app) scheduleOptions(f runFlags, cron string, every time.Duration, overlap string) (client.ScheduleOptions, error) {
	if f.id == "" {
		return client.ScheduleOptions{}, usagef("--id is required: the schedule's id, which names its runs' tasks")
	}
	if len(f.id) > maxScheduleID {
		return client.ScheduleOptions{}, usagef("--id %q is too long for a schedule (at most %d)", f.id, maxScheduleID)
	}
	if cron == "" && every == 0 {
		return client.ScheduleOptions{}, usagef("schedule create needs --cron EXPR or --every D")
	}
	if every != 0 && every < time.Second {
		return client.ScheduleOptions{}, usagef("--every %s is too short (at least 1s)", every)
	}
	policy, ok := overlapPolicies[overlap]
	if !ok {
		return client.ScheduleOptions{}, usagef("--overlap %q is not one of skip, buffer-one, buffer-all, cancel-other, terminate-other, allow-all", overlap)
	}
	in, err := a.taskInput(f)
	if err != nil {
		return client.ScheduleOptions{}, err
	}
	spec := client.ScheduleSpec{}
	if cron != "" {
		spec.CronExpressions = []string{cron}
	}
	if every != 0 {
		spec.Intervals = []client.ScheduleIntervalSpec{{Every: every}}
	}
	return client.ScheduleOptions{
		ID:      in.TaskID,
		Spec:    spec,
		Overlap: policy,
		Memo:    map[string]any{memoScheduleSpec: specText(cron, every)},
		// Every run's workflow id is this id, "-" and the run's scheduled
		// time; its task id (changeScheduledTaskIDs) is
		// workflows.ScheduledTaskID of the schedule id and that time.
		Action: &client.ScheduleWorkflowAction{
			ID: workflows.WorkflowID(in.TaskID), Workflow: workflows.AgentTask, Args: []any{in},
			TaskQueue: a.cfg.TaskQueue, StaticSummary: taskstart.Summary(in),
		},
	}, nil
}

func specText(cron string, every time.Duration) string {
	var parts []string
	if cron != "" {
		parts = append(parts, "cron "+cron)
	}
	if every != 0 {
		parts = append(parts, "every "+every.String())
	}
	return strings.Join(parts, ", ")
}

func (a *app) scheduleListCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the schedules of capstan tasks",
		Args:  usageArgs(cobra.NoArgs),
		RunE: a.withClient(func(ctx context.Context, c client.Client, opts client.Options, _ []string) error {
			it, err := c.ScheduleClient().List(ctx, client.ScheduleListOptions{})
			if err != nil {
				return fmt.Errorf("list schedules: %w", err)
			}
			dc := dataConverter(opts)
			out := []scheduleView{}
			for it.HasNext() {
				e, err := it.Next()
				if err != nil {
					return fmt.Errorf("list schedules: %w", err)
				}
				if e.WorkflowType.Name != "AgentTask" {
					continue
				}
				v := scheduleView{ID: e.ID, Paused: e.Paused, Note: e.Note, Next: e.NextActionTimes}
				if p := e.Memo.GetFields()[memoScheduleSpec]; p != nil {
					_ = dc.FromPayload(p, &v.Spec)
				}
				out = append(out, v)
			}
			if asJSON {
				return printJSON(a.stdout, out)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SCHEDULE\tSPEC\tSTATE\tNEXT RUN")
			for _, v := range out {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.ID, v.Spec, v.state(), v.next())
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the schedules as JSON")
	return cmd
}

func dataConverter(opts client.Options) converter.DataConverter {
	if opts.DataConverter != nil {
		return opts.DataConverter
	}
	return converter.GetDefaultDataConverter()
}
