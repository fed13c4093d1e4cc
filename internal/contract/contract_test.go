package contract_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
)

// The workflow sees an activity's error wrapped in an ActivityError; the
// helpers look through it, and only at the closed set.
func TestErrorHelpersReadTheWrappedApplicationError(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("activity error (type: ExecuteTool): %w", err) }
	unknown := temporal.NewNonRetryableApplicationError("may have acted", contract.ErrTypeOperationUnknown, errors.New("reset"))
	for _, tc := range []struct {
		err                                     error
		typ                                     string
		conflict, inProgress, unknown, workerCf bool
	}{
		{wrap(temporal.NewApplicationError("held", contract.ErrTypeOperationInProgress)), contract.ErrTypeOperationInProgress, false, true, false, false},
		{wrap(temporal.NewApplicationError("other hash", contract.ErrTypeOperationConflict)), contract.ErrTypeOperationConflict, true, false, false, false},
		{wrap(unknown), contract.ErrTypeOperationUnknown, false, false, true, false},
		{wrap(temporal.NewApplicationError("no token", contract.ErrTypeWorkerConfig)), contract.ErrTypeWorkerConfig, false, false, false, true},
		{wrap(temporal.NewApplicationError("not ours", "SomethingElse")), "", false, false, false, false},
		{errors.New("plain"), "", false, false, false, false},
	} {
		if got := contract.ErrorTypeOf(tc.err); got != tc.typ {
			t.Errorf("ErrorTypeOf(%v) = %q, want %q", tc.err, got, tc.typ)
		}
		if contract.IsOperationConflict(tc.err) != tc.conflict || contract.IsOperationInProgress(tc.err) != tc.inProgress ||
			contract.IsOperationUnknown(tc.err) != tc.unknown || contract.IsWorkerConfig(tc.err) != tc.workerCf {
			t.Errorf("Is* of %v: conflict %t, in progress %t, unknown %t, worker config %t; want %t %t %t %t", tc.err,
				contract.IsOperationConflict(tc.err), contract.IsOperationInProgress(tc.err), contract.IsOperationUnknown(tc.err), contract.IsWorkerConfig(tc.err),
				tc.conflict, tc.inProgress, tc.unknown, tc.workerCf)
		}
	}
	// Describe keeps what the workflow recorded before the helpers: the
	// application error's own text, type and cause included, without the
	// ActivityError's wrapping.
	if got, want := contract.Describe(wrap(unknown)), "may have acted (type: OperationUnknown, retryable: false): reset"; got != want {
		t.Errorf("Describe = %q, want %q", got, want)
	}
	if got := contract.Describe(errors.New("plain")); got != "plain" {
		t.Errorf("Describe(plain) = %q", got)
	}
}

func TestDetailsAreReadOnlyFromTheirOwnErrorType(t *testing.T) {
	t.Parallel()
	report := contract.AttemptReport{AttemptID: "t/t1/a1", Outcome: model.OutcomeOverloaded, Phase: model.PhaseHeadersReceived, HTTPStatus: 529}
	attempt := temporal.NewNonRetryableApplicationError("overloaded", contract.ErrTypeModelAttempt, nil, report)
	if got, ok := contract.AttemptReportOf(fmt.Errorf("wrapped: %w", attempt)); !ok || got != report {
		t.Errorf("AttemptReportOf = %+v, %t; want %+v", got, ok, report)
	}
	if _, ok := contract.BreakerWaitOf(attempt); ok {
		t.Error("BreakerWaitOf read a ModelAttempt error")
	}
	wait := contract.BreakerWait{Breaker: "github/write", State: "open", Wait: 31 * time.Second}
	open := temporal.NewApplicationErrorWithOptions("open", contract.ErrTypeBreakerOpen, temporal.ApplicationErrorOptions{Details: []any{wait}})
	if got, ok := contract.BreakerWaitOf(open); !ok || got != wait {
		t.Errorf("BreakerWaitOf = %+v, %t; want %+v", got, ok, wait)
	}
	if _, ok := contract.AttemptReportOf(open); ok {
		t.Error("AttemptReportOf read a BreakerOpen error")
	}
	if _, ok := contract.AttemptReportOf(temporal.NewApplicationError("no details", contract.ErrTypeModelAttempt)); ok {
		t.Error("AttemptReportOf read an error without details")
	}
}

// The error types are in recorded histories and the Temporal UI: their
// strings never change, and each is in the closed set once.
func TestErrorTypesKeepTheirRecordedStrings(t *testing.T) {
	t.Parallel()
	want := []string{"ModelAttempt", "OperationConflict", "OperationInProgress", "OperationUnknown", "OperationNotSent",
		"DeliveryFailed", "DeliveryNotSent", "WorkerConfig", "BreakerOpen", "InvalidResolution", "Transient", "WorkerStopping"}
	if fmt.Sprint(contract.ErrorTypes) != fmt.Sprint(want) {
		t.Errorf("ErrorTypes = %v, want %v", contract.ErrorTypes, want)
	}
}

// AttemptReport.Outcome is in recorded histories: the attempt outcomes that
// share a word with the effect vocabulary still spell it as recorded.
func TestAttemptOutcomesKeepTheirRecordedStrings(t *testing.T) {
	t.Parallel()
	for o, s := range map[model.Outcome]string{model.OutcomeNotSent: "not_sent", model.OutcomeUnknown: "unknown",
		model.OutcomeCancelled: "cancelled", model.OutcomeCompleted: "completed", model.OutcomeBreakerOpen: "breaker_open"} {
		if string(o) != s {
			t.Errorf("attempt outcome %q, want %q", o, s)
		}
	}
}
