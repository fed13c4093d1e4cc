package tool

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Verifier is implemented by a tool that can tell, by reading its target,
// whether a call whose outcome is in doubt took effect. ExecuteTool asks it
// after an ambiguous failure of an idempotent write (a timeout, a reset, a
// 5xx after the request may have been written), and after a refusal marked
// ErrChangedSinceRead on a retry, instead of guessing.
type Verifier interface {
	// Verify reads what call would have changed. landed reports that the
	// call's effect is in place, with res the result Execute would have
	// returned; !landed with a nil error means it is provably not in place,
	// so sending the call again is safe. An error means Verify could not
	// tell: the outcome stays unknown.
	Verify(ctx context.Context, call Call) (res Result, landed bool, err error)
}

// ErrChangedSinceRead reports a write the service refused because its target
// changed after the tool read it (a compare-and-set that lost, such as a 409
// for a stale blob sha). This call wrote nothing. On a retry it may be the
// trace of the earlier attempt's own write, which landed although its answer
// was lost; a Verifier tool is then asked before the refusal counts as a
// failure.
var ErrChangedSinceRead = errors.New("the target changed since it was read")

// RetryAfterError reports a request the service refused for a rate limit:
// it did nothing, and asked not to be asked again before Wait has passed
// (counted from when the error was made). Classify reports it as
// VerdictNotSent; the activity boundary turns Wait into Temporal's
// next-retry delay.
type RetryAfterError struct {
	// Wait is how long the service asked not to be asked again.
	Wait time.Duration
	// Err is the service's refusal.
	Err error
}

// Error is Err's message, with the wait asked.
func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (rate limited: retry after %s)", e.Err, e.Wait)
}

// Unwrap returns Err.
func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfter returns the wait asked by the rate limit err carries, if any.
func RetryAfter(err error) (time.Duration, bool) {
	var ra *RetryAfterError
	if !errors.As(err, &ra) {
		return 0, false
	}
	return ra.Wait, true
}
