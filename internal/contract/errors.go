package contract

import (
	"errors"
	"slices"
	"strings"

	"go.temporal.io/sdk/temporal"
)

// Error types of the application errors the activities return. The workflow
// reads them only through the helpers below, never by comparing strings;
// they are the only contract between the two about failure. Each constant's
// name is its value, prefixed ErrType, because the value is what the
// Temporal UI shows and recorded histories hold. These are all of them: a
// new way for an activity to fail is a new constant here and in ErrorTypes.
const (
	// ErrTypeModelAttempt: a model attempt ended without a complete output.
	// The details carry an AttemptReport (read it with AttemptReportOf);
	// the workflow's turn guard decides whether to try again. Never retried
	// by Temporal itself.
	ErrTypeModelAttempt = "ModelAttempt"
	// ErrTypeOperationConflict: the operation id is known with another
	// request hash.
	ErrTypeOperationConflict = "OperationConflict"
	// ErrTypeOperationInProgress: another worker holds a live claim; retry
	// after the lease.
	ErrTypeOperationInProgress = "OperationInProgress"
	// ErrTypeOperationUnknown: the request may have reached the external
	// system and its outcome is not known. The operation is unknown in the
	// ledger and must be reconciled, never blindly retried.
	ErrTypeOperationUnknown = "OperationUnknown"
	// ErrTypeOperationNotSent: the external system took nothing (rate
	// limited, or the request never left); the operation is absent and
	// Temporal retries it, after the error's next-retry delay when the
	// system named one.
	ErrTypeOperationNotSent = "OperationNotSent"
	// ErrTypeDeliveryFailed: the delivery target refused the message.
	ErrTypeDeliveryFailed = "DeliveryFailed"
	// ErrTypeDeliveryNotSent: the delivery target took nothing (rate
	// limited, or the request never left); Temporal retries it, after the
	// error's next-retry delay when the target named one.
	ErrTypeDeliveryNotSent = "DeliveryNotSent"
	// ErrTypeWorkerConfig: the worker lacks what the call needs (a
	// provider, a token); retrying on the same worker cannot help.
	ErrTypeWorkerConfig = "WorkerConfig"
	// ErrTypeBreakerOpen: the dependency's circuit breaker was open, so
	// nothing was sent (a tool operation's claim was released) — or, for
	// breaker "ledger", the ledger could not be reached before anything
	// was sent. Retryable;
	// its next-retry delay is the time left in the open period plus
	// jitter, and its details a BreakerWait naming the breaker. The
	// workflow waits that long itself rather than spend the activity's
	// retry attempts (internal/workflows/options.go).
	ErrTypeBreakerOpen = "BreakerOpen"
	// ErrTypeInvalidResolution: a person's resolution that Reconcile
	// cannot record (found without a URL, or a verdict other than found
	// or absent). Never retried.
	ErrTypeInvalidResolution = "InvalidResolution"
	// ErrTypeTransient: a failure that may pass on its own (a read or an
	// idempotent write to repeat). Temporal retries it after the jittered
	// delay the error carries. A ledger that could not be reached is not
	// one: that is ErrTypeBreakerOpen of breaker "ledger".
	ErrTypeTransient = "Transient"
	// ErrTypeWorkerStopping: the worker running the attempt was asked to
	// stop (SIGTERM) and the attempt ended unfinished after its stop
	// timeout, having recorded where it stands (activities.HandOff).
	// Temporal retries it, on another worker, after the short delay the
	// error carries: the next attempt does not wait for a lease or a
	// heartbeat timeout to run out.
	ErrTypeWorkerStopping = "WorkerStopping"
)

// ErrorTypes are every error type above: the closed set.
var ErrorTypes = []string{
	ErrTypeModelAttempt, ErrTypeOperationConflict, ErrTypeOperationInProgress, ErrTypeOperationUnknown,
	ErrTypeOperationNotSent, ErrTypeDeliveryFailed, ErrTypeDeliveryNotSent, ErrTypeWorkerConfig,
	ErrTypeBreakerOpen, ErrTypeInvalidResolution, ErrTypeTransient, ErrTypeWorkerStopping,
}

// ErrorTypeOf returns the type of the application error err is or wraps
// (as the workflow gets it from an activity, wrapped in an ActivityError),
// when that type is one of ErrorTypes; "" for any other error.
func ErrorTypeOf(err error) string {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || !slices.Contains(ErrorTypes, appErr.Type()) {
		return ""
	}
	return appErr.Type()
}

// IsOperationConflict reports an ErrTypeOperationConflict error.
func IsOperationConflict(err error) bool { return ErrorTypeOf(err) == ErrTypeOperationConflict }

// IsOperationInProgress reports an ErrTypeOperationInProgress error.
func IsOperationInProgress(err error) bool { return ErrorTypeOf(err) == ErrTypeOperationInProgress }

// IsOperationUnknown reports an ErrTypeOperationUnknown error.
func IsOperationUnknown(err error) bool { return ErrorTypeOf(err) == ErrTypeOperationUnknown }

// IsWorkerConfig reports an ErrTypeWorkerConfig error.
func IsWorkerConfig(err error) bool { return ErrorTypeOf(err) == ErrTypeWorkerConfig }

// Describe is the sentence the workflow records for an activity's failure:
// the application error's own text (its message, type and cause, as
// ApplicationError.Error gives them) without the ActivityError around it,
// or err's text when it carries no application error.
func Describe(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Error()
	}
	return err.Error()
}

// AttemptReportOf returns the report carried by a failed ModelTurn: err is
// what the workflow got from the activity (it may wrap the application
// error). ok is false for any other error, including an ErrTypeModelAttempt
// error whose details cannot be decoded.
func AttemptReportOf(err error) (r AttemptReport, ok bool) {
	return detailsOf[AttemptReport](err, ErrTypeModelAttempt)
}

// BreakerWaitOf returns the wait an ErrTypeBreakerOpen error carries; err is
// what the workflow got from the activity. ok is false for any other error.
func BreakerWaitOf(err error) (w BreakerWait, ok bool) {
	return detailsOf[BreakerWait](err, ErrTypeBreakerOpen)
}

// detailsOf decodes the details of the application error of type typ that
// err is or wraps.
func detailsOf[T any](err error, typ string) (d T, ok bool) {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != typ || !appErr.HasDetails() {
		return d, false
	}
	if appErr.Details(&d) != nil {
		var zero T
		return zero, false
	}
	return d, true
}

// AtBoundary is err as an activity hands it to Temporal. Temporal reads
// only the outermost error: an application error that something wrapped
// with fmt.Errorf for context reaches the workflow as a retryable failure of
// no type in ErrorTypes, its own type, retryability, delay and details
// buried in the cause, where neither the retry policy nor ErrorTypeOf looks.
// AtBoundary lifts the first application error in err's chain to the top,
// with err's text as its message; an error that is already an
// application error at the top, or carries none, is returned unchanged.
func AtBoundary(err error) error {
	var appErr *temporal.ApplicationError
	if err == nil || !errors.As(err, &appErr) {
		return err
	}
	if top, ok := err.(*temporal.ApplicationError); ok {
		return top
	}
	opts := temporal.ApplicationErrorOptions{
		NonRetryable:   appErr.NonRetryable(),
		NextRetryDelay: appErr.NextRetryDelay(),
		Category:       appErr.Category(),
		Cause:          appErr.Unwrap(),
	}
	switch appErr.Type() {
	case ErrTypeModelAttempt:
		if r, ok := AttemptReportOf(appErr); ok {
			opts.Details = []any{r}
		}
	case ErrTypeBreakerOpen:
		if w, ok := BreakerWaitOf(appErr); ok {
			opts.Details = []any{w}
		}
	}
	// The message is err's text with the application error's own message in
	// its place: its type and cause are the new error's again.
	msg := strings.Replace(err.Error(), appErr.Error(), appErr.Message(), 1)
	return temporal.NewApplicationErrorWithOptions(msg, appErr.Type(), opts)
}
