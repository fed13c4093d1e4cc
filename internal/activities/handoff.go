package activities

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/redact"
)

// HandOff hands what a stopping worker was running on to the next attempt
// at once (issue 18, docs/design.md §5.4).
//
// Asked to stop (SIGTERM), the SDK stops polling and gives running
// activities the stop timeout to finish; then it cancels their contexts
// with worker.ErrWorkerShutdown and returns, waiting neither for them to
// end nor for their answers to reach the server. Such an activity still
// records where its operation stands — a call cut off after its request
// left is UNKNOWN with its claim cleared, an idempotent write read back, a
// reconciliation handed back — since every record after a call uses a
// context the cancellation does not break. But its answer went down with
// the process, and the server learnt of the attempt only when its
// heartbeat timeout ran out.
//
// Through a HandOff, an activity that ends after its worker began stopping
// reports its own ending to the server through the client (so the SDK
// reports nothing), and the worker process waits for those reports (Wait)
// before it closes the client and the ledger:
//
//   - a result, or a failure Temporal does not retry (an UNKNOWN
//     operation's contract.ErrTypeOperationUnknown: the workflow reconciles
//     it at once), is reported as it is;
//   - a retryable failure that chose its own wait (a breaker, another
//     claim's lease, a rate limit) is reported as it is;
//   - any other failure — the cancellation itself, a transient error — is
//     reported as contract.ErrTypeWorkerStopping, retried by Temporal on
//     another worker after handOffDelay instead of its backoff.
//
// When the report cannot be made, the SDK is left to try, as without a
// HandOff; the heartbeat timeout remains the backstop.
type HandOff struct {
	client   client.Client
	logger   *slog.Logger
	redactor *redact.Redactor
	running  sync.WaitGroup
}

// handOffDelay bounds the next-retry delay of a handed-off attempt: drawn
// between a fifth of it and all of it, so the attempts of one stopping
// worker do not all land on the next worker in the same instant.
const handOffDelay = 250 * time.Millisecond

// handOffReportTimeout bounds the report of one handed-off attempt.
const handOffReportTimeout = 10 * time.Second

// NewHandOff is the hand-off of a worker polling through c.
func NewHandOff(c client.Client, logger *slog.Logger, r *redact.Redactor) *HandOff {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &HandOff{client: c, logger: logger, redactor: r}
}

// Interceptor is the activities' boundary (RedactingInterceptor, with the
// redactor NewHandOff was given) with the hand-off: the one interceptor a
// worker process installs.
func (h *HandOff) Interceptor() interceptor.WorkerInterceptor {
	return &boundary{h: h, r: h.redactor}
}

// Wait returns once every activity that began through the hand-off has
// ended and had its ending reported, or when timeout has passed; it
// reports whether all had. Call it after the worker stopped (no activity
// starts any more) and before closing the client.
func (h *HandOff) Wait(timeout time.Duration) bool {
	done := make(chan struct{})
	go func() {
		h.running.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(timeout):
		return false
	}
}

// execute runs one activity (run) and, when it ended after its worker
// began stopping, reports its ending itself (see HandOff).
func (h *HandOff) execute(ctx context.Context, run func() (any, error)) (any, error) {
	h.running.Add(1)
	defer h.running.Done()
	res, err := run()
	if !errors.Is(context.Cause(ctx), worker.ErrWorkerShutdown) || errors.Is(err, activity.ErrResultPending) {
		return res, err
	}
	err = handedOn(err)
	info := activity.GetInfo(ctx)
	rctx, cancel := context.WithTimeout(context.Background(), handOffReportTimeout)
	defer cancel()
	if rerr := h.client.CompleteActivity(rctx, info.TaskToken, res, err); rerr != nil {
		h.logger.Warn("stopping worker: reporting an activity's ending failed; its heartbeat timeout will tell the server",
			"activity", info.ActivityType.Name, "activity_id", info.ActivityID, "error", rerr)
		return res, err
	}
	h.logger.Info("stopping worker: activity handed on", "activity", info.ActivityType.Name,
		"activity_id", info.ActivityID, "workflow_id", info.WorkflowExecution.ID, "error", err)
	return nil, activity.ErrResultPending
}

// handedOn is how an attempt's failure is reported when its worker is
// stopping (see HandOff): unchanged when Temporal will not retry it or it
// chose its own wait, otherwise a contract.ErrTypeWorkerStopping failure
// retried after a short jittered delay.
func handedOn(err error) error {
	var appErr *temporal.ApplicationError
	if err == nil || (errors.As(err, &appErr) && (appErr.NonRetryable() || keepsItsWait[appErr.Type()])) {
		return err
	}
	delay := handOffDelay/5 + rand.N(handOffDelay*4/5)
	return temporal.NewApplicationErrorWithOptions("the worker was stopped during this attempt, which recorded where it stands: "+err.Error(),
		contract.ErrTypeWorkerStopping, temporal.ApplicationErrorOptions{NextRetryDelay: delay})
}

// keepsItsWait are the retryable failures whose next-retry delay says what
// the next attempt must wait for, whichever worker runs it.
var keepsItsWait = map[string]bool{
	contract.ErrTypeBreakerOpen:         true,
	contract.ErrTypeOperationInProgress: true,
	contract.ErrTypeOperationNotSent:    true,
	contract.ErrTypeDeliveryNotSent:     true,
	contract.ErrTypeModelAttempt:        true,
}
