package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/workflows"
)

// approveCommand sends an operation that waits for a person's approval
// (the workflow's approve update, docs/design.md §5.9).
func (a *app) approveCommand() *cobra.Command {
	var note, as string
	cmd := &cobra.Command{
		Use:   "approve TASK_ID OPERATION_ID [--note TEXT] [--as NAME]",
		Short: "Approve an operation that waits for approval: it is sent, exactly once",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := workflows.ApprovalRequest{OperationID: args[1], By: as, Note: note}
			return a.answerApproval(cmd, args, workflows.UpdateApprove, req)
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "a note recorded with the approval")
	cmd.Flags().StringVar(&as, "as", defaultResolver(), "who approves it, recorded in the task's result and journal")
	return cmd
}

// denyCommand refuses an operation that waits for a person's approval
// (the workflow's deny update): nothing is sent, and the model reads the
// reason.
func (a *app) denyCommand() *cobra.Command {
	var reason, as string
	cmd := &cobra.Command{
		Use:   "deny TASK_ID OPERATION_ID --reason TEXT [--as NAME]",
		Short: "Deny an operation that waits for approval: nothing is sent, and the model is told the reason",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if reason == "" {
				return usagef("deny needs --reason TEXT: the model reads it as the tool's result")
			}
			req := workflows.ApprovalRequest{OperationID: args[1], By: as, Reason: reason}
			return a.answerApproval(cmd, args, workflows.UpdateDeny, req)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why it is denied; the model reads it (required)")
	cmd.Flags().StringVar(&as, "as", defaultResolver(), "who denies it, recorded in the task's result and journal")
	return cmd
}

// answerApproval sends the update and prints what the task took. The
// update returns only once the task has taken the answer; a refusal (the
// operation waits for no approval, or somebody answered first) is one
// sentence and exit status 2.
func (a *app) answerApproval(cmd *cobra.Command, args []string, update string, req workflows.ApprovalRequest) error {
	if req.By == "" {
		return usagef("--as needs a name")
	}
	return a.withTask(func(ctx context.Context, c client.Client, _ client.Options, taskID string) error {
		var res workflows.ApprovalResult
		if err := sendUpdate(ctx, c, taskID, update, "the "+update, req, &res); err != nil {
			return err
		}
		fmt.Fprintf(a.stdout, "task %s: operation %s %s by %s: %s\n", taskID, res.OperationID, res.Decision, res.By, res.Summary)
		return nil
	})(cmd, args)
}
