package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/workflows"
)

// unversioned is the build of a task no Worker Deployment Version holds.
const unversioned = "unversioned"

// taskBuild is the build a task runs on, from its workflow's versioning
// info: "DEPLOYMENT/BUILD" and whether it is pinned there, or unversioned.
// A pinned task runs to its end on workers of that build. A versioning
// override (`temporal workflow update-options`) decides over the
// behaviour its worker gave, as it does for the server's routing and for
// the search attributes `starter versions` and `list` read: pinned to a
// version, the task is on that version; auto-upgrade, it is not pinned.
func taskBuild(desc *workflowservice.DescribeWorkflowExecutionResponse) (build string, pinned bool) {
	vi := desc.GetWorkflowExecutionInfo().GetVersioningInfo()
	v, pinned := vi.GetDeploymentVersion(), vi.GetBehavior() == enumspb.VERSIONING_BEHAVIOR_PINNED
	switch o := vi.GetVersioningOverride(); {
	case o.GetPinned().GetVersion().GetBuildId() != "":
		v, pinned = o.GetPinned().GetVersion(), true
	case o.GetAutoUpgrade():
		pinned = false
	}
	if v.GetBuildId() == "" {
		return unversioned, false
	}
	return v.GetDeploymentName() + "/" + v.GetBuildId(), pinned
}

// buildLine is the line `starter status` prints about a task's build.
func buildLine(desc *workflowservice.DescribeWorkflowExecutionResponse) string {
	build, pinned := taskBuild(desc)
	switch {
	case build == unversioned:
		return "build: unversioned"
	case pinned:
		return "build: " + build + " (pinned: it ends on this build's workers)"
	default:
		return "build: " + build + " (auto-upgrade)"
	}
}

// versionsReport is what `starter versions` reports: the open tasks of
// each build, and for each GetVersion change whether an open task may
// still take its old branch.
type versionsReport struct {
	Builds  []buildRow  `json:"builds"`
	Changes []changeRow `json:"changes"`
}

type buildRow struct {
	Build  string    `json:"build"`
	Pinned bool      `json:"pinned"`
	Open   int       `json:"open_tasks"`
	Oldest time.Time `json:"oldest_start"`
}

// changeRow is one change id. MayNeedOld counts the open tasks that are
// not pinned and whose run's history holds no marker putting the change in
// effect: each may predate the change (or has not reached its fork yet)
// and would replay its old branch on whatever code unversioned workers
// run. Retire is MayNeedOld == 0.
type changeRow struct {
	ID         string   `json:"change_id"`
	MayNeedOld int      `json:"open_tasks_that_may_take_the_old_branch"`
	Tasks      []string `json:"tasks,omitempty"`
	Retire     bool     `json:"old_branch_can_retire"`
}

func (a *app) versionsCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "versions [--json]",
		Short: "Show open tasks per build, and which GetVersion branches of the workflow code can retire",
		Args:  usageArgs(cobra.NoArgs),
		RunE: a.withClient(func(ctx context.Context, c client.Client, opts client.Options, _ []string) error {
			rep, err := buildVersionsReport(ctx, c, dataConverter(opts), opts.Namespace, a.scanProgress("open tasks"))
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, rep)
			}
			printVersions(a.stdout, rep)
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// historiesInFlight bounds the describes and history reads `starter
// versions` has in flight at once: enough to hide the round trip of each
// among tens of thousands of open tasks, few enough that one operator's
// report does not crowd out the pool's workers, which share the
// namespace's rate limit at the frontend.
const historiesInFlight = 8

// openTask is one open task of the report: what its list entry says, and
// what scanOpenTask learns of it.
type openTask struct {
	wid, rid string
	started  time.Time
	build    string
	pinned   bool
	// known says that build and pinned came from the list entry; without
	// it, scanOpenTask describes the run.
	known bool
	// gone is a task whose describe found none: it is gone since the list.
	gone bool
	// mayTakeOld are the ids of the changes whose old branch the task may
	// take (changeRow).
	mayTakeOld []string
}

// buildVersionsReport lists every open task with its build (from the list
// entry's search attributes, or a describe when they do not tell) and
// reads the version markers of the history of each that is not pinned
// (and its start input: a run that started unmarked, workflows.RunsUnmarked,
// has every change in effect), historiesInFlight at a time; progress says
// how far it got. The report is the same whatever order the reads end in.
func buildVersionsReport(ctx context.Context, c client.Client, dc converter.DataConverter, ns string, progress *scanProgress) (versionsReport, error) {
	tasks, err := listOpenTasks(ctx, c, ns, keepsVersions(ctx, c, ns))
	if err != nil {
		return versionsReport{}, err
	}
	if err := scanOpenTasks(ctx, c, dc, tasks, progress); err != nil {
		return versionsReport{}, err
	}
	return summarizeVersions(tasks), nil
}

// listOpenTasks lists the namespace's open AgentTask runs, in the list's
// order, each with its build when its search attributes tell it
// (listedBuild).
func listOpenTasks(ctx context.Context, c client.Client, ns string, serverKeepsVersions bool) ([]openTask, error) {
	var tasks []openTask
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: ns, PageSize: 500, NextPageToken: token,
			Query: "WorkflowType = 'AgentTask' AND ExecutionStatus = 'Running'"})
		if err != nil {
			return nil, fmt.Errorf("list open tasks: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			t := openTask{wid: e.GetExecution().GetWorkflowId(), rid: e.GetExecution().GetRunId(), started: e.GetStartTime().AsTime()}
			t.build, t.pinned, t.known = listedBuild(e.GetSearchAttributes().GetIndexedFields(), serverKeepsVersions)
			tasks = append(tasks, t)
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return tasks, nil
		}
	}
}

// scanOpenTasks runs scanOpenTask on every task, historiesInFlight at a
// time, and returns the first error, once every scan in flight has
// stopped. Each scan writes only its own task.
func scanOpenTasks(ctx context.Context, c client.Client, dc converter.DataConverter, tasks []openTask, progress *scanProgress) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer progress.start(len(tasks))()
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(historiesInFlight, len(tasks)) {
		wg.Go(func() {
			for i := range next {
				if err := scanOpenTask(ctx, c, dc, &tasks[i]); err != nil {
					cancel(err)
				}
				progress.add(1)
			}
		})
	}
feed:
	for i := range tasks {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	return context.Cause(ctx)
}

// scanOpenTask completes t: its build from a describe when its list entry
// did not tell it, and, when it is not pinned, the changes whose old
// branch it may take, from its history.
func scanOpenTask(ctx context.Context, c client.Client, dc converter.DataConverter, t *openTask) error {
	if !t.known {
		d, err := c.DescribeWorkflow(ctx, t.wid, t.rid)
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			t.gone = true
			return nil
		}
		if err != nil {
			return fmt.Errorf("describe task %s: %w", workflows.TaskIDOf(t.wid), err)
		}
		t.build, t.pinned = taskBuild(d.RawResponse)
	}
	if t.pinned {
		return nil // it replays its own build's code, never this code's branches
	}
	markers, unmarked, err := runVersions(ctx, c, dc, t.wid, t.rid)
	if err != nil {
		return err
	}
	for _, ch := range workflows.Changes {
		// A run that started unmarked has every change in effect with no
		// marker to say so, but those made after the stamp's level.
		if (!unmarked || ch.OwnMarkerOnly) && !inEffect(markers, ch.ID) {
			t.mayTakeOld = append(t.mayTakeOld, ch.ID)
		}
	}
	return nil
}

// summarizeVersions is the report of the scanned tasks: builds sorted by
// name, changes in workflows.Changes' order, each change's tasks in the
// list's order.
func summarizeVersions(tasks []openTask) versionsReport {
	var rep versionsReport
	builds := map[string]*buildRow{}
	mayNeed := map[string][]string{}
	for _, t := range tasks {
		if t.gone {
			continue
		}
		row := builds[t.build]
		if row == nil {
			row = &buildRow{Build: t.build, Pinned: t.pinned}
			builds[t.build] = row
		}
		row.Open++
		if row.Oldest.IsZero() || t.started.Before(row.Oldest) {
			row.Oldest = t.started
		}
		for _, id := range t.mayTakeOld {
			mayNeed[id] = append(mayNeed[id], strings.TrimPrefix(t.wid, "task-"))
		}
	}
	for _, r := range builds {
		rep.Builds = append(rep.Builds, *r)
	}
	sort.Slice(rep.Builds, func(i, j int) bool { return rep.Builds[i].Build < rep.Builds[j].Build })
	for _, ch := range workflows.Changes {
		rep.Changes = append(rep.Changes, changeRow{ID: ch.ID, MayNeedOld: len(mayNeed[ch.ID]), Tasks: mayNeed[ch.ID], Retire: len(mayNeed[ch.ID]) == 0})
	}
	return rep
}

// runVersions reads a run's history once: the change ids of its
// GetVersion markers, and whether the run started unmarked
// (workflows.RunsUnmarked: its start input stamped, no umbrella marker). A
// start input that does not decode counts as unstamped, which errs towards
// keeping branches.
func runVersions(ctx context.Context, c client.Client, dc converter.DataConverter, wid, rid string) (markers map[string]bool, unmarked bool, err error) {
	markers = map[string]bool{}
	var in workflows.AgentTaskInput
	it := c.GetWorkflowHistory(ctx, wid, rid, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, false, fmt.Errorf("read the history of %s: %w", wid, err)
		}
		if decoded, started, err := startedInput(ev, dc); started {
			if err == nil {
				in = decoded
			}
			continue
		}
		m := ev.GetMarkerRecordedEventAttributes()
		if m == nil || m.GetMarkerName() != versionMarkerName {
			continue
		}
		var id string
		if p := m.GetDetails()[versionMarkerChangeID].GetPayloads(); len(p) > 0 && converter.GetDefaultDataConverter().FromPayload(p[0], &id) == nil {
			markers[id] = true
		}
	}
	return markers, workflows.RunsUnmarked(in, markers), nil
}

// The Go SDK's names for a GetVersion marker and its change id.
const (
	versionMarkerName     = "Version"
	versionMarkerChangeID = "change-id"
)

func printVersions(w io.Writer, rep versionsReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BUILD\tOPEN TASKS\tPINNED\tOLDEST START")
	for _, b := range rep.Builds {
		fmt.Fprintf(tw, "%s\t%d\t%t\t%s\n", b.Build, b.Open, b.Pinned, b.Oldest.Local().Format(time.DateTime))
	}
	if len(rep.Builds) == 0 {
		fmt.Fprintln(tw, "(no open task)\t\t\t")
	}
	fmt.Fprintln(tw, "\t\t\t")
	fmt.Fprintln(tw, "CHANGE\tMAY TAKE OLD BRANCH\tOLD BRANCH CAN RETIRE\t")
	for _, ch := range rep.Changes {
		fmt.Fprintf(tw, "%s\t%d\t%t\t\n", ch.ID, ch.MayNeedOld, ch.Retire)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "A pinned task replays only its own build's code: keep that build's workers until its row is gone.")
	fmt.Fprintln(w, "An old branch can retire (GetVersion(ctx, id, 1, 1)) when no open unpinned task may take it; retire the recorded histories that predate it with it.")
}

// inEffect reports whether a task whose history holds markers runs change
// at its newest version: by the change's own marker, or by an umbrella
// marker that covers it, directly or through another umbrella
// (all-changes-v13 covers all-changes-v7, which covers the first five).
func inEffect(markers map[string]bool, change string) bool {
	for id := change; id != ""; id = coveredBy(id) {
		if markers[id] {
			return true
		}
	}
	return false
}

func coveredBy(change string) string {
	for _, ch := range workflows.Changes {
		if ch.ID == change {
			return ch.CoveredBy
		}
	}
	return ""
}
