package main

import (
	"context"
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/workflows"
)

// approveCommand sends an operation that waits for a person's approval
// (the workflow's approve update, docs/design.md §5.9).
func (a *app) approveCommand() *cobra.Command {
	var note, as, hash string
	cmd := &cobra.Command{
		Use:   "approve TASK_ID OPERATION_ID --hash SHA256 [--note TEXT] [--as NAME]",
		Short: "Approve an operation that waits for approval: the call whose hash is given is sent, exactly once",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			req := workflows.ApprovalRequest{OperationID: args[1], By: as, Note: note, Hash: hash}
			return a.answerApproval(cmd, args, workflows.UpdateApprove, req)
		},
	}
	cmd.Flags().StringVar(&note, "note", "", "a note recorded with the approval")
	cmd.Flags().StringVar(&hash, "hash", "", "the sha256 of the call approved, as the approval request shows it (starter show TASK OP prints the call and its hash); the task takes the approval only for that call")
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
			req := workflows.ApprovalRequest{OperationID: args[1], By: as, Reason: reason}
			return a.answerApproval(cmd, args, workflows.UpdateDeny, req)
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why it is denied; the model reads it (required)")
	cmd.Flags().StringVar(&as, "as", defaultResolver(), "who denies it, recorded in the task's result and journal")
	return cmd
}

// answerApproval sends the update and prints what the task took.
func (a *app) answerApproval(cmd *cobra.Command, args []string, update string, req workflows.ApprovalRequest) error {
	if err := checkApproval(update, req); err != nil {
		return err
	}
	return a.withTask(func(ctx context.Context, c client.Client, opts client.Options, taskID string) error {
		req.Client = clientIdentity(opts)
		res, err := sendApproval(ctx, c, taskID, update, req)
		if err != nil {
			return err
		}
		fmt.Fprint(a.stdout, approvalText(taskID, res))
		return nil
	})(cmd, args)
}

// checkApproval refuses, before anything is sent, an answer that names
// nobody and a denial without a reason: one sentence, a usage error.
func checkApproval(update string, req workflows.ApprovalRequest) error {
	if update == workflows.UpdateDeny && req.Reason == "" {
		return usagef("deny needs --reason TEXT: the model reads it as the tool's result")
	}
	if req.By == "" {
		return usagef("--as needs a name")
	}
	return nil
}

// sendApproval sends the approve or deny update (checkApproval first) and
// returns what the task took. The update returns only once the task has
// taken the answer; a refusal (the operation waits for no approval, or
// somebody answered first) is one sentence, a usage error (exit status 2).
// `starter approve`, `starter deny`, approve_task and deny_task answer
// through it.
func sendApproval(ctx context.Context, c client.Client, taskID, update string, req workflows.ApprovalRequest) (workflows.ApprovalResult, error) {
	var res workflows.ApprovalResult
	if err := checkApproval(update, req); err != nil {
		return res, err
	}
	err := sendUpdate(ctx, c, taskID, update, "the "+update, req, &res)
	return res, err
}

// clientIdentity is the identity the Temporal client with opts gives the
// server: its Identity, or the SDK's default ("PID@HOST@"). The answer
// records it beside --as; the SDK does not give the workflow the identity
// an update's request carries.
func clientIdentity(opts client.Options) string {
	if opts.Identity != "" {
		return opts.Identity
	}
	host, _ := os.Hostname()
	return fmt.Sprintf("%d@%s@", os.Getpid(), host)
}

// approvalText is the line `starter approve` and `starter deny` print.
func approvalText(taskID string, res workflows.ApprovalResult) string {
	return fmt.Sprintf("task %s: operation %s %s by %s: %s\n", taskID, res.OperationID, res.Decision, res.By, res.Summary)
}
