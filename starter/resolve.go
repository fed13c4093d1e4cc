package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/workflows"
)

// resolveCommand hands a person's verdict on an operation nobody else could
// tell to the task waiting for it (the workflow's resolve update).
func (a *app) resolveCommand() *cobra.Command {
	var found string
	var absent, abort bool
	cmd := &cobra.Command{
		Use:   "resolve TASK_ID OPERATION_ID (--found URL | --absent | --abort)",
		Short: "Settle an operation that waits for a person: it happened (--found URL), it did not (--absent), or stop the task (--abort)",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := workflows.ResolveRequest{OperationID: args[1]}
			switch {
			case cmd.Flags().Changed("found") && !absent && !abort:
				req.Decision, req.URL = workflows.DecisionFound, found
			case absent && !abort && !cmd.Flags().Changed("found"):
				req.Decision = workflows.DecisionAbsent
			case abort && !absent && !cmd.Flags().Changed("found"):
				req.Decision = workflows.DecisionAbort
			default:
				return usagef("give exactly one of --found URL, --absent or --abort")
			}
			return a.withTask(func(ctx context.Context, c client.Client, _ client.Options, taskID string) error {
				return a.resolve(ctx, c, taskID, req)
			})(cmd, args)
		},
	}
	cmd.Flags().StringVar(&found, "found", "", "the operation took effect; URL is what you found (the pull request, the comment, the message)")
	cmd.Flags().BoolVar(&absent, "absent", false, "the operation did not take effect; capstan executes it again with the same operation id")
	cmd.Flags().BoolVar(&abort, "abort", false, "stop the task here; the operation stays for you to settle")
	return cmd
}

func (a *app) resolve(ctx context.Context, c client.Client, taskID string, req workflows.ResolveRequest) error {
	req.OperationID = fullOperationID(ctx, c, taskID, req.OperationID)
	handle, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflows.WorkflowID(taskID),
		UpdateName:   workflows.UpdateResolve,
		Args:         []any{req},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return usagef("no running task %s (workflow %s)", taskID, workflows.WorkflowID(taskID))
	case err != nil:
		// The task's validator refused it: nothing was recorded.
		return usagef("task %s refused the resolution: %v", taskID, unwrapUpdateError(err))
	}
	var res workflows.ResolveResult
	if err := handle.Get(ctx, &res); err != nil {
		return usagef("task %s refused the resolution: %v", taskID, unwrapUpdateError(err))
	}
	fmt.Fprintf(a.stdout, "task %s: operation %s resolved as %s\n", taskID, res.OperationID, res.Decision)
	return nil
}

// unwrapUpdateError keeps the validator's own sentence.
func unwrapUpdateError(err error) error {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err
		}
		err = next
	}
}

// fullOperationID expands the short form of an operation id that status
// prints to fit 100 columns — an ending of the id at a ":" boundary, such
// as the id without its "<tenant>:<task id>:" — to the task's one
// operation or delivery with that ending. Any other id, or one the task
// cannot be asked about, is returned as given, for the task's validator
// to judge.
func fullOperationID(ctx context.Context, c client.Client, taskID, id string) string {
	if strings.Contains(id, ":"+taskID+":") {
		return id
	}
	v, err := c.QueryWorkflow(ctx, workflows.WorkflowID(taskID), "", workflows.QueryStatus)
	var res workflows.TaskResult
	if err != nil || v.Get(&res) != nil {
		return id
	}
	var match []string
	for _, op := range res.Operations {
		if strings.HasSuffix(op.OperationID, ":"+id) {
			match = append(match, op.OperationID)
		}
	}
	for _, d := range res.Deliveries {
		if strings.HasSuffix(d.OperationID, ":"+id) {
			match = append(match, d.OperationID)
		}
	}
	if len(match) != 1 {
		return id
	}
	return match[0]
}
