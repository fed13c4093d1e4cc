package activities_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
)

// A stopping worker reports a cut-short attempt so that the next one
// starts at once: a cancellation or a transient failure becomes a
// WorkerStopping failure retried within a quarter second; what Temporal does
// not retry (an UNKNOWN operation, which the workflow reconciles) and a
// failure that names its own wait pass unchanged.
func TestHandedOnRetriesACutShortAttemptAtOnce(t *testing.T) {
	t.Parallel()
	for _, err := range []error{context.Canceled, errors.New("connection reset"),
		temporal.NewApplicationError("flaky", contract.ErrTypeTransient)} {
		got := activities.HandedOn(err)
		var appErr *temporal.ApplicationError
		if !errors.As(got, &appErr) || appErr.Type() != contract.ErrTypeWorkerStopping || appErr.NonRetryable() {
			t.Errorf("handed on %v = %v, want a retryable %s failure", err, got, contract.ErrTypeWorkerStopping)
			continue
		}
		if d := appErr.NextRetryDelay(); d <= 0 || d > 250*time.Millisecond {
			t.Errorf("handed on %v: next retry after %s, want within 250ms", err, d)
		}
	}
	for _, err := range []error{nil,
		temporal.NewNonRetryableApplicationError("may have acted", contract.ErrTypeOperationUnknown, nil),
		temporal.NewApplicationErrorWithOptions("held", contract.ErrTypeOperationInProgress,
			temporal.ApplicationErrorOptions{NextRetryDelay: 3 * time.Second}),
	} {
		if got := activities.HandedOn(err); got != err {
			t.Errorf("handed on %v = %v, want it unchanged", err, got)
		}
	}
}
