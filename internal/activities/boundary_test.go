package activities_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
)

// A non-retryable application error that an activity wraps for context is
// tried once and reaches the workflow with its type — through the
// activities' Interceptor. Without it, Temporal sees a retryable error of
// no known type, and tries again.
func TestInterceptorKeepsAWrappedErrorsTypeAndRetryability(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		interceptors []interceptor.WorkerInterceptor
		wantAttempts int32
		wantType     string
	}{
		{"without the boundary", nil, 3, ""},
		{"with the boundary", []interceptor.WorkerInterceptor{activities.Interceptor()}, 1, contract.ErrTypeOperationConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := s.NewTestWorkflowEnvironment()
			env.SetWorkerOptions(worker.Options{Interceptors: tc.interceptors})
			var attempts int32
			env.RegisterActivityWithOptions(func(ctx context.Context) error {
				attempts = activity.GetInfo(ctx).Attempt
				conflict := temporal.NewNonRetryableApplicationError("other request hash", contract.ErrTypeOperationConflict, nil)
				return fmt.Errorf("%w; and handing operation op-1 back failed: ledger closed", conflict)
			}, activity.RegisterOptions{Name: "HandsBack"})
			env.ExecuteWorkflow(func(ctx workflow.Context) (string, error) {
				ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
					StartToCloseTimeout: time.Minute,
					RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Millisecond, MaximumAttempts: 3},
				})
				err := workflow.ExecuteActivity(ctx, "HandsBack").Get(ctx, nil)
				return contract.ErrorTypeOf(err), nil
			})
			var got string
			if err := env.GetWorkflowResult(&got); err != nil {
				t.Fatal(err)
			}
			if attempts != tc.wantAttempts || got != tc.wantType {
				t.Errorf("attempts %d, type %q; want %d, %q", attempts, got, tc.wantAttempts, tc.wantType)
			}
		})
	}
}
