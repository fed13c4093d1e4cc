package activities

import (
	"context"

	"go.temporal.io/sdk/interceptor"

	"github.com/capstanhq/capstan/internal/contract"
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

type boundary struct {
	interceptor.WorkerInterceptorBase
	h *HandOff // nil: errors cross the boundary, nothing is handed off
}

func (b *boundary) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	a := &activityBoundary{h: b.h}
	a.Next = next
	return a
}

type activityBoundary struct {
	interceptor.ActivityInboundInterceptorBase
	h *HandOff
}

func (b *activityBoundary) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	if b.h == nil {
		res, err := b.Next.ExecuteActivity(ctx, in)
		return res, contract.AtBoundary(err)
	}
	return b.h.execute(ctx, func() (any, error) {
		res, err := b.Next.ExecuteActivity(ctx, in)
		return res, contract.AtBoundary(err)
	})
}
