package activities_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// halfway draws every jitter at the middle of its range.
func halfway(d *activities.Deps) { d.Random = func() float64 { return 0.5 } }

// A wait a service named is kept, and jitter added on top, so a pool of
// workers limited together does not come back together.
func TestRateLimitWaitGetsJitter(t *testing.T) {
	t.Parallel()
	f := newFixture(t, halfway)
	f.sb.Slack.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
		return true
	})
	_, err := f.env.ExecuteActivity(f.acts.Deliver, contract.DeliverInput{OperationID: "op-d", Channel: "#c", Text: "x"})
	appErr := appError(t, err)
	if want := 7*time.Second + 700*time.Millisecond; appErr.Type() != contract.ErrTypeDeliveryNotSent || appErr.NextRetryDelay() != want {
		t.Fatalf("err = %v (delay %s), want %s after %s: Slack's 7 s plus half a fifth of it", err, appErr.NextRetryDelay(), contract.ErrTypeDeliveryNotSent, want)
	}
}

// A failure that names no wait (here: the arguments cannot be loaded from
// the ledger) is retried after the activity's own backoff, jittered:
// Temporal's policy alone would retry every worker's failures in lockstep.
func TestTransientFailureGetsAJitteredBackoff(t *testing.T) {
	t.Parallel()
	f := newFixture(t, halfway)
	_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1",
		OperationID: "d:T:t1:github_get_file:1", ToolCallID: "c", Tool: githubtools.NameGetFile, Arguments: "sha256:0000"})
	appErr := appError(t, err)
	// First attempt, Temporal's default initial interval of 1 s: equal
	// jitter puts the retry between 0.5 s and 1 s, here halfway.
	if want := 750 * time.Millisecond; appErr.Type() != contract.ErrTypeTransient || appErr.NonRetryable() || appErr.NextRetryDelay() != want {
		t.Fatalf("err = %v (type %s, delay %s), want a retryable %s after %s", err, appErr.Type(), appErr.NextRetryDelay(), contract.ErrTypeTransient, want)
	}
}
