package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/workflows"
)

// unversioned is the build of a task no Worker Deployment Version holds.
const unversioned = "unversioned"

// taskBuild is the build a task runs on, from its workflow's versioning
// info: "DEPLOYMENT/BUILD" and whether it is pinned there, or unversioned.
// A pinned task runs to its end on workers of that build.
func taskBuild(desc *workflowservice.DescribeWorkflowExecutionResponse) (build string, pinned bool) {
	vi := desc.GetWorkflowExecutionInfo().GetVersioningInfo()
	v := vi.GetDeploymentVersion()
	if v.GetBuildId() == "" {
		return unversioned, false
	}
	return v.GetDeploymentName() + "/" + v.GetBuildId(), vi.GetBehavior() == enumspb.VERSIONING_BEHAVIOR_PINNED
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
			rep, err := buildVersionsReport(ctx, c, dataConverter(opts), opts.Namespace)
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

// buildVersionsReport lists every open task, describes each for its build,
// and reads the version markers of the history of each that is not pinned
// (and its start input: a run that started unmarked, workflows.RunsUnmarked,
// has every change in effect).
func buildVersionsReport(ctx context.Context, c client.Client, dc converter.DataConverter, ns string) (versionsReport, error) {
	var rep versionsReport
	builds := map[string]*buildRow{}
	mayNeed := map[string][]string{}
	var token []byte
	for {
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Namespace: ns, PageSize: 500, NextPageToken: token,
			Query: "WorkflowType = 'AgentTask' AND ExecutionStatus = 'Running'"})
		if err != nil {
			return rep, fmt.Errorf("list open tasks: %w", err)
		}
		for _, e := range resp.GetExecutions() {
			wid, rid := e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()
			d, err := c.DescribeWorkflow(ctx, wid, rid)
			if err != nil {
				continue // it is gone since the list
			}
			build, pinned := taskBuild(d.RawResponse)
			row := builds[build]
			if row == nil {
				row = &buildRow{Build: build, Pinned: pinned}
				builds[build] = row
			}
			row.Open++
			if st := e.GetStartTime().AsTime(); row.Oldest.IsZero() || st.Before(row.Oldest) {
				row.Oldest = st
			}
			if pinned {
				continue // it replays its own build's code, never this code's branches
			}
			markers, unmarked, err := runVersions(ctx, c, dc, wid, rid)
			if err != nil {
				return rep, err
			}
			if unmarked {
				continue // every change in effect, with no marker to say so
			}
			for _, ch := range workflows.Changes {
				if !inEffect(markers, ch.ID) {
					mayNeed[ch.ID] = append(mayNeed[ch.ID], strings.TrimPrefix(wid, "task-"))
				}
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			break
		}
	}
	for _, r := range builds {
		rep.Builds = append(rep.Builds, *r)
	}
	sort.Slice(rep.Builds, func(i, j int) bool { return rep.Builds[i].Build < rep.Builds[j].Build })
	for _, ch := range workflows.Changes {
		rep.Changes = append(rep.Changes, changeRow{ID: ch.ID, MayNeedOld: len(mayNeed[ch.ID]), Tasks: mayNeed[ch.ID], Retire: len(mayNeed[ch.ID]) == 0})
	}
	return rep, nil
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
