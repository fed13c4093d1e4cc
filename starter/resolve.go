package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/user"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/workflows"
)

// resolveCommand hands a person's verdict on an operation nobody else could
// tell to the task waiting for it (the workflow's resolve update).
func (a *app) resolveCommand() *cobra.Command {
	var found, as string
	var absent, abort bool
	cmd := &cobra.Command{
		Use:   "resolve TASK_ID OPERATION_ID (--found URL | --absent | --abort) [--as NAME]",
		Short: "Settle an operation that waits for a person: it happened (--found URL), it did not (--absent), or stop the task (--abort)",
		Args:  usageArgs(cobra.ExactArgs(2)),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The task expands a short operation id (workflows.MatchOperation)
			// and records who resolved it.
			req := workflows.ResolveRequest{OperationID: args[1], ResolvedBy: as}
			if req.ResolvedBy == "" {
				return usagef("--as needs a name")
			}
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
	cmd.Flags().StringVar(&as, "as", defaultResolver(), "who resolves it, recorded in the task's result and journal; a second resolver is told this name")
	return cmd
}

func (a *app) resolve(ctx context.Context, c client.Client, taskID string, req workflows.ResolveRequest) error {
	var res workflows.ResolveResult
	if err := sendUpdate(ctx, c, taskID, workflows.UpdateResolve, "the resolution", req, &res); err != nil {
		return err
	}
	fmt.Fprintf(a.stdout, "task %s: operation %s resolved as %s by %s\n", taskID, res.OperationID, res.Decision, req.ResolvedBy)
	return nil
}

// sendUpdate sends the task's update, waits until the task has taken it,
// and decodes its answer into res. A task that is not running, or whose
// validator or handler refused the update (what names it), is one
// sentence for exit status 2; nothing was recorded.
func sendUpdate(ctx context.Context, c client.Client, taskID, update, what string, req, res any) error {
	handle, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   workflows.WorkflowID(taskID),
		UpdateName:   update,
		Args:         []any{req},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		return usagef("no running task %s (workflow %s)", taskID, workflows.WorkflowID(taskID))
	case err != nil:
		return usagef("task %s refused %s: %v", taskID, what, unwrapUpdateError(err))
	}
	if err := handle.Get(ctx, res); err != nil {
		return usagef("task %s refused %s: %v", taskID, what, unwrapUpdateError(err))
	}
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

// defaultResolver names the person at this terminal: user@host.
func defaultResolver() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if name == "" {
		name = "unknown"
	}
	return name + "@" + config.Hostname()
}
