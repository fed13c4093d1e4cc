package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/taskstart"
	"github.com/capstanhq/capstan/internal/workflows"
)

func (a *app) statusCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status TASK_ID",
		Short: "Show a task's status, turns, operations and deliveries",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: a.withTask(func(ctx context.Context, c client.Client, opts client.Options, taskID string) error {
			res, desc, err := taskStatus(ctx, c, taskID)
			if err != nil {
				return err
			}
			ui := a.cfg.WorkflowURL(opts.Namespace, workflows.WorkflowID(taskID))
			if asJSON {
				build, pinned := taskBuild(desc)
				return printJSON(a.stdout, statusJSON{TaskResult: res, Build: build, Pinned: pinned})
			}
			printResult(a.stdout, res, ui)
			fmt.Fprintln(a.stdout, buildLine(desc))
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the status as JSON")
	return cmd
}

// statusJSON is `starter status --json`: the task's result with the build
// it runs on (taskBuild).
type statusJSON struct {
	workflows.TaskResult
	Build  string `json:"build"`
	Pinned bool   `json:"pinned"`
}

func (a *app) listCommand() *cobra.Command {
	var needsHuman, awaitingApproval, asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--needs-human | --awaiting-approval] [--json]",
		Short: "List recent tasks",
		Args:  usageArgs(cobra.NoArgs),
		RunE: a.withClient(func(ctx context.Context, c client.Client, opts client.Options, _ []string) error {
			tasks, err := listTasks(ctx, c, opts.Namespace, needsHuman, awaitingApproval)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(a.stdout, tasks)
			}
			return writeTaskList(a.stdout, tasks)
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the tasks as JSON")
	cmd.Flags().BoolVar(&needsHuman, "needs-human", false, "only running tasks that wait for a person (starter resolve)")
	cmd.Flags().BoolVar(&awaitingApproval, "awaiting-approval", false, "only running tasks with an operation that waits for approval (starter approve, starter deny)")
	return cmd
}

// taskStatus is the task's result so far, asked of the running task
// (its status query: a worker must be running), or its result once it
// ended. `starter status` and task_status answer with it.
func taskStatus(ctx context.Context, c client.Client, taskID string) (workflows.TaskResult, *workflowservice.DescribeWorkflowExecutionResponse, error) {
	wid := workflows.WorkflowID(taskID)
	desc, err := describe(ctx, c, wid)
	if err != nil {
		return workflows.TaskResult{}, nil, notFound(err, taskID)
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		res, err := taskstart.AwaitResult(ctx, c, wid, "")
		return res, desc, err
	}
	var res workflows.TaskResult
	v, err := c.QueryWorkflow(ctx, wid, "", workflows.QueryStatus)
	if err != nil {
		return res, desc, fmt.Errorf("ask task %s for its status (is a worker running?): %w", taskID, err)
	}
	if err := v.Get(&res); err != nil {
		return res, desc, fmt.Errorf("decode status of task %s: %w", taskID, err)
	}
	return res, desc, nil
}

// listedTask is one row of `starter list`, and of list_tasks.
type listedTask struct {
	TaskID string `json:"task_id"`
	// Status is the task's own status (its search attribute), else the
	// workflow's: running, completed, failed, …
	Status string `json:"status"`
	// Tenant is the task's tenant (its search attribute CapstanTenant),
	// empty for a task started without one.
	Tenant string `json:"tenant"`
	// Build is the Worker Deployment Version the task runs on,
	// "DEPLOYMENT/BUILD" as `starter status` prints it, or unversioned
	// (listedBuildLabel).
	Build   string    `json:"build"`
	Repo    string    `json:"repo,omitempty"`
	Started time.Time `json:"started"`
}

// listTasks lists the 50 most recent tasks of the namespace; needsHuman
// and awaitingApproval keep only the running ones that wait for a person's
// resolve, or for an approval. Every field of a row comes from the one list
// call: no row costs a call of its own.
//
// A task says both on CapstanFlags; one started before changeSearchFlags
// on a Bool (CapstanNeedsHuman, CapstanAwaitingApproval), which the filter
// reads too where the namespace defines it (flagFilter).
func listTasks(ctx context.Context, c client.Client, namespace string, needsHuman, awaitingApproval bool) ([]listedTask, error) {
	var flags []workflows.Flag
	if needsHuman {
		flags = append(flags, workflows.FlagNeedsHuman)
	}
	if awaitingApproval {
		flags = append(flags, workflows.FlagAwaitingApproval)
	}
	legacy, known := map[workflows.Flag]bool{}, true
	if len(flags) > 0 {
		legacy, known = legacyFlags(ctx, c, namespace)
	}
	resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: namespace, PageSize: 50, Query: flagFilter(flags, legacy),
	})
	var invalid *serviceerror.InvalidArgument
	if errors.As(err, &invalid) && !known {
		// The namespace's attributes could not be read, and the server
		// refused the filter: it may lack a Bool the filter named, which
		// no task there then ever set.
		resp, err = c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: namespace, PageSize: 50, Query: flagFilter(flags, nil),
		})
	}
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	tasks := []listedTask{}
	for _, e := range resp.GetExecutions() {
		sa := e.GetSearchAttributes().GetIndexedFields()
		t := listedTask{
			TaskID:  workflows.TaskIDOf(e.GetExecution().GetWorkflowId()),
			Status:  strings.ToLower(strings.TrimPrefix(e.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_")),
			Build:   listedBuildLabel(sa),
			Started: e.GetStartTime().AsTime(),
		}
		if s, ok := keywordAttr(sa, workflows.AttrStatus.GetName()); ok && s != "" {
			t.Status = s
		}
		t.Tenant, _ = keywordAttr(sa, workflows.AttrTenant.GetName())
		t.Repo, _ = keywordAttr(sa, workflows.AttrRepo.GetName())
		tasks = append(tasks, t)
	}
	return tasks, nil
}

// writeTaskList prints tasks as `starter list`'s table.
func writeTaskList(w io.Writer, tasks []listedTask) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK\tSTATUS\tTENANT\tBUILD\tREPO\tSTARTED")
	for _, t := range tasks {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.TaskID, t.Status, t.Tenant, t.Build, t.Repo, t.Started.Local().Format(time.DateTime))
	}
	return tw.Flush()
}

func (a *app) cancelCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel TASK_ID",
		Short: "Cancel a running task",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: a.withTask(func(ctx context.Context, c client.Client, _ client.Options, taskID string) error {
			if err := c.CancelWorkflow(ctx, workflows.WorkflowID(taskID), ""); err != nil {
				return notFound(err, taskID)
			}
			fmt.Fprintf(a.stdout, "cancellation requested for task %s\n", taskID)
			return nil
		}),
	}
}

// withClient runs fn with a Temporal client that is closed when fn returns.
func (a *app) withClient(fn func(ctx context.Context, c client.Client, opts client.Options, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		c, opts, err := a.dial(ctx)
		if err != nil {
			return err
		}
		defer c.Close()
		return fn(ctx, c, opts, args)
	}
}

// withTask is withClient for a command whose one argument is a task id.
func (a *app) withTask(fn func(ctx context.Context, c client.Client, opts client.Options, taskID string) error) func(*cobra.Command, []string) error {
	return a.withClient(func(ctx context.Context, c client.Client, opts client.Options, args []string) error {
		return fn(ctx, c, opts, args[0])
	})
}

func notFound(err error, taskID string) error {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return fmt.Errorf("no task %s (workflow %s)", taskID, workflows.WorkflowID(taskID))
	}
	return fmt.Errorf("task %s: %w", taskID, err)
}

// follow prints the task's journal as it grows, until the returned stop is
// called.
func (a *app) follow(ctx context.Context, c client.Client, wid string) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		seen := 0
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			v, err := c.QueryWorkflow(ctx, wid, "", workflows.QueryJournal)
			var lines []string
			if err != nil || v.Get(&lines) != nil {
				continue
			}
			for _, l := range lines[min(seen, len(lines)):] {
				for _, part := range wrap(shortLine(taskIDOf(wid), clean(l)), Columns, "  ", "      ") {
					fmt.Fprintln(a.stdout, part)
				}
			}
			seen = max(seen, len(lines))
		}
	}()
	return func() { cancel(); <-done }
}

// report prints a finished task and turns a failed or cancelled one into
// exit status 1.
func (a *app) report(res workflows.TaskResult, ui string, asJSON bool) error {
	if asJSON {
		if err := printJSON(a.stdout, res); err != nil {
			return err
		}
	} else {
		printResult(a.stdout, res, ui)
	}
	if res.Status != workflows.StatusCompleted {
		return &taskEndedError{status: res.Status}
	}
	return nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// printResult prints a task's result in at most Columns columns:
// operations by their labels (the full ids are in --json), long lines
// wrapped.
func printResult(w io.Writer, res workflows.TaskResult, ui string) {
	writeResult(w, res, ui, "")
}

// writeResult is printResult; shownAs, when set, names the attempt whose
// committed text the caller has shown already as the final answer, which
// is then not printed a second time. Every text from the task is cleaned
// of control characters (clean); --json prints it exactly instead.
func writeResult(w io.Writer, res workflows.TaskResult, ui, shownAs string) {
	res = cleanResult(res)
	lines := []string{fmt.Sprintf("task %s: %s", res.TaskID, res.Status)}
	if res.Waiting != "" {
		lines = append(lines, wrap(res.Waiting, Columns, "  ", "    ")...)
	}
	if res.FailureCode != "" || res.Message != "" {
		lines = append(lines, wrap(fmt.Sprintf("%s: %s", res.FailureCode, res.Message), Columns, "  ", "    ")...)
	}
	attempts := 0
	for _, t := range res.Turns {
		attempts += len(t.Attempts)
	}
	lines = append(lines, fmt.Sprintf("turns: %d (%d model attempts)", len(res.Turns), attempts))
	if res.Spend != nil {
		lines = append(lines, spendLine(*res.Spend))
	}
	lines = append(lines, operationsTable(res.TaskID, res.Operations)...)
	for _, d := range res.Deliveries {
		state := string(d.State)
		if d.Recovered {
			state += " (recovered)"
		}
		lines = append(lines, wrap(fmt.Sprintf("delivery %s: %s %s", d.Target, state, d.ExternalID), Columns, "", "  ")...)
	}
	for _, op := range res.Operations {
		if op.State == capstan.OutcomeNeedsHuman {
			lines = append(lines, wrap(fmt.Sprintf("needs a person: operation %s: %s", opLabel(res.TaskID, op), op.Reason), Columns, "", "  ")...)
			lines = append(lines, resolveHint(res, op.OperationID)...)
		}
	}
	for _, d := range res.Deliveries {
		if d.State == capstan.OutcomeNeedsHuman {
			lines = append(lines, "needs a person: delivery to "+d.Target)
			lines = append(lines, resolveHint(res, d.OperationID)...)
		}
	}
	lines = append(lines, approvalLines(res)...)
	switch {
	case res.FinalText == "":
	case shownAs != "":
		lines = append(lines, fmt.Sprintf("final answer: as committed by %s, above", shownAs))
	default:
		lines = append(lines, "final answer:")
		lines = append(lines, wrap(res.FinalText, Columns, "  ", "  ")...)
	}
	lines = append(lines, "ui: "+ui)
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// operationsTable lists operations by label, state and external id.
func operationsTable(taskID string, ops []workflows.OperationRecord) []string {
	if len(ops) == 0 {
		return nil
	}
	rows := [][]string{{"OPERATION", "STATE", "EXTERNAL ID"}}
	for _, op := range ops {
		state := string(op.State)
		switch {
		case op.Replayed:
			state += " (replayed)"
		case op.Recovered:
			state += " (recovered)"
		}
		rows = append(rows, []string{opLabel(taskID, op), state, op.ExternalID})
	}
	return table(rows, Columns, 2, 0)
}

// shortOperationID is the shortest ending of an operation id, at ":"
// boundaries, that fits a resolve hint's line and names no other
// operation or delivery of the task; the task expands it again by the same
// rule (workflows.MatchOperation). Without "<tenant>:<task id>:" and the
// chain scope at the least.
func shortOperationID(res workflows.TaskResult, opID string) string {
	short := opID
	if i := strings.Index(opID, ":"+res.TaskID+":"); i >= 0 {
		short = opID[i+len(res.TaskID)+2:]
	}
	ids := workflows.OperationIDs(res)
	// Without the chain scope too (workflows.ChainScope), which every
	// operation of the task shares.
	if s := workflows.WithoutScope(short); s != short {
		if got, err := workflows.MatchOperation(ids, s); err == nil && got == opID {
			short = s
		}
	}
	for width(short) > Columns-8 {
		_, tail, ok := strings.Cut(short, ":")
		if !ok {
			break
		}
		if got, err := workflows.MatchOperation(ids, tail); err != nil || got != opID {
			break
		}
		short = tail
	}
	return short
}

// resolveHint is the command a person runs, one argument a line so that
// it fits; the lines paste as one shell command.
func resolveHint(res workflows.TaskResult, opID string) []string {
	return []string{
		"  resolve it: starter resolve " + res.TaskID + " \\",
		"      " + shortOperationID(res, opID) + " \\",
		"      --found URL | --absent | --abort",
	}
}

// taskIDOf is the task id of a task's workflow id.
func taskIDOf(wid string) string { return workflows.TaskIDOf(wid) }

// approvalLines say which operations were approved, and by whom (a
// person's name, or mcp:<client> through starter mcp serve), which were
// denied, and why, and which wait for approval, with the commands that
// answer, one argument a line so that they fit; each pastes as one shell
// command.
func approvalLines(res workflows.TaskResult) []string {
	var lines []string
	for _, op := range res.Operations {
		if a := op.Approval; a != nil && a.Decision == workflows.DecisionApproved && a.By != "" && op.State != capstan.OutcomeAwaitingApproval {
			line := fmt.Sprintf("approved: operation %s by %s", opLabel(res.TaskID, op), clean(a.By))
			if a.Note != "" {
				line += ": " + clean(a.Note)
			}
			lines = append(lines, wrap(line, Columns, "", "  ")...)
		}
		if op.State == capstan.OutcomeDenied {
			lines = append(lines, wrap(fmt.Sprintf("denied: operation %s: %s", opLabel(res.TaskID, op), op.Reason), Columns, "", "  ")...)
		}
		if op.State != capstan.OutcomeAwaitingApproval {
			continue
		}
		short := shortOperationID(res, op.OperationID)
		lines = append(lines, wrap(fmt.Sprintf("awaiting approval: operation %s: %s", opLabel(res.TaskID, op), op.Summary), Columns, "", "  ")...)
		if op.CallHash != "" {
			lines = append(lines,
				"  the call:   starter show "+res.TaskID+" \\",
				"      "+short,
				"  approve it: starter approve "+res.TaskID+" \\",
				"      "+short+" \\",
				"      --hash "+op.CallHash)
		} else {
			lines = append(lines,
				"  approve it: starter approve "+res.TaskID+" \\",
				"      "+short)
		}
		lines = append(lines,
			"  or deny it: starter deny "+res.TaskID+" \\",
			"      "+short+" \\",
			"      --reason TEXT")
	}
	return lines
}

// flagFilter is `starter list`'s visibility query: capstan's tasks and,
// for each of flags, only the running ones that carry it — on CapstanFlags,
// or on its Bool where legacy holds the flag (the namespace defines that
// Bool, so a task started before changeSearchFlags may set it).
func flagFilter(flags []workflows.Flag, legacy map[workflows.Flag]bool) string {
	query := "WorkflowType = 'AgentTask'"
	for _, f := range flags {
		query += " AND " + workflows.FlagQuery(f, legacy[f])
	}
	if len(flags) > 0 {
		query += " AND ExecutionStatus = 'Running'"
	}
	return query
}

// legacyFlags reports which flags' Bools namespace ns defines; known is
// false when its attributes cannot be read, and then every flag counts as
// defined (listTasks asks again without them if the server refuses).
func legacyFlags(ctx context.Context, c client.Client, ns string) (legacy map[workflows.Flag]bool, known bool) {
	legacy = map[workflows.Flag]bool{}
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	for _, f := range workflows.Flags {
		_, defined := list.GetCustomAttributes()[workflows.LegacyFlagAttribute(f).GetName()]
		legacy[f] = err != nil || defined
	}
	return legacy, err == nil
}
