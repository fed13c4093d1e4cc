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
// these activities installs it (worker.Options.Interceptors).
func Interceptor() interceptor.WorkerInterceptor { return &boundary{} }

type boundary struct {
	interceptor.WorkerInterceptorBase
}

func (*boundary) InterceptActivity(_ context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	b := &activityBoundary{}
	b.Next = next
	return b
}

type activityBoundary struct {
	interceptor.ActivityInboundInterceptorBase
}

func (b *activityBoundary) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := b.Next.ExecuteActivity(ctx, in)
	return res, contract.AtBoundary(err)
}
