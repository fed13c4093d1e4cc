package activities

import (
	"context"

	"go.temporal.io/sdk/activity"

	"github.com/capstanhq/capstan/internal/ledger"
)

// scoped returns ctx carrying the task's chain scope (ledger.Scope) for
// every ledger write the activity makes: the workflow's token, and the
// namespace, workflow id and run the activity was scheduled by, which
// retention asks Temporal about. A task without a token (started before
// ledger keys were scoped) writes unscoped rows.
func scoped(ctx context.Context, token, taskID string) context.Context {
	if token == "" || !activity.IsActivity(ctx) {
		return ctx
	}
	info := activity.GetInfo(ctx)
	return ledger.WithScope(ctx, ledger.Scope{Token: token, Namespace: info.Namespace,
		WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID, TaskID: taskID})
}
