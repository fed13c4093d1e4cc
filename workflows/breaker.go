package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"
)

// This file holds how a task waits for a dependency's circuit breaker
// (docs/design.md §7): an attempt, operation or delivery the breaker kept
// from being sent cost nothing, so the task waits the time left — a
// durable timer, journalled, in the current details and in `starter
// status` — and then tries again, spending no retry budget.

// waitsOnBreakers reports whether this task waits out open breakers
// itself (changeWorkflowWaitsOutBreakers). Tasks started before it let
// Temporal retry a BreakerOpen error within the activity's attempts and
// read a breaker_open attempt as an outcome the guard has no row for.
func (t *task) waitsOnBreakers(ctx workflow.Context) bool {
	return t.inEffect(ctx, changeWorkflowWaitsOutBreakers)
}

// waitForBreaker waits d for breaker key, which kept what from being sent.
// The wait is a line in the journal (in a persistent task, one every 30 s
// of it: sleep), the workflow's current details (the Temporal UI shows
// them) and the task's status, until it is over. Other tasks sleep it in
// one timer: an open period is 30 s plus at most 5 s of jitter, and the
// v5 histories recorded it so.
func (t *task) waitForBreaker(ctx workflow.Context, key string, d time.Duration, what string) error {
	until := workflow.Now(ctx).Add(d)
	t.note(ctx, "waiting %s for breaker %s: %s was not sent (no retry budget spent)", roundWait(d), key, what)
	t.result.Waiting = fmt.Sprintf("waiting %s for breaker %s (until %s)", roundWait(d), key, until.UTC().Format("15:04:05 MST"))
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**Waiting %s for breaker `%s`** (until %s): %s was not sent; it is tried again when the breaker lets a call through.",
		roundWait(d), key, until.UTC().Format(time.RFC3339), what))
	var err error
	if t.in.Persistent {
		err = t.sleep(ctx, d, "breaker "+key)
	} else {
		err = workflow.Sleep(ctx, d)
	}
	t.result.Waiting = ""
	workflow.SetCurrentDetails(ctx, "")
	return err
}

// roundWait shows a wait to the second, or to the hundredth under one.
func roundWait(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Second)
}
