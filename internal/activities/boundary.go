package activities

import (
	"context"

	"go.temporal.io/sdk/interceptor"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/redact"
)

// Interceptor is the activities' boundary with Temporal: every error an
// activity returns goes through contract.AtBoundary, so an application
// error wrapped for context anywhere below (a reconciler handing its
// operation back, a helper adding the operation's id) still reaches the
// workflow with its type, retryability and details. A worker that runs
// these activities installs it (worker.Options.Interceptors); a worker
// process installs a HandOff instead, which is this boundary and the
// hand-off of what a stopping worker was running (handoff.go).
func Interceptor() interceptor.WorkerInterceptor { return &boundary{} }

// RedactingInterceptor is Interceptor with the secrets of r masked in what
// every activity hands Temporal: its result, and its failure's message,
// cause and details (redactedFailure). What the workflow builds from them
// (an operation's reason, a task's message) never holds a secret.
func RedactingInterceptor(r *redact.Redactor) interceptor.WorkerInterceptor {
	return &boundary{r: r}
}

type boundary struct {
	interceptor.WorkerInterceptorBase
	h *HandOff // nil: errors cross the boundary, nothing is handed off
	r *redact.Redactor
}

func (b *boundary) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityBoundary{h: b.h, r: b.r}
	a.Next = next
	return a
}

type activityBoundary struct {
	interceptor.ActivityInboundInterceptorBase
	h *HandOff
	r *redact.Redactor
}

func (b *activityBoundary) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	run := func() (any, error) {
		res, err := b.Next.ExecuteActivity(ctx, in)
		res, _ = redact.Value(b.r, res)
		return res, redactedFailure(b.r, contract.AtBoundary(err))
	}
	if b.h == nil {
		return run()
	}
	return b.h.execute(ctx, run)
}
