package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/workflows"
)

// progressEvery is how often `run --wait` without a terminal says on
// stderr what the task does: under 30 s, so that an unattended runner that
// kills a silent job never kills one that waits for a retry, a breaker or
// a person (docs/design.md §9.3).
const progressEvery = 25 * time.Second

// keepTalking prints a progress line to stderr every progressEvery until
// the returned stop is called, unless stderr is a terminal (a person
// watches, and the journal is enough).
func (a *app) keepTalking(ctx context.Context, c client.Client, wid string) (stop func()) {
	if _, _, tty := terminalSize(a.stderr); tty {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(progressEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			// Only the state, no journal lines: from is past any journal.
			var p workflows.Progress
			v, err := c.QueryWorkflow(ctx, wid, "", workflows.QueryProgress, 1<<30)
			if err == nil {
				err = v.Get(&p)
			}
			if ctx.Err() != nil {
				return
			}
			line := progressLine(taskIDOf(wid), p, time.Now())
			if err != nil {
				line = fmt.Sprintf("%s task %s: still waiting for it to end (it did not answer: %v)", time.Now().UTC().Format(time.TimeOnly), taskIDOf(wid), err)
			}
			fmt.Fprintln(a.stderr, cut(clean(line), Columns))
		}
	}()
	return func() { cancel(); <-done }
}

// progressLine says in one line what a running task does now: whom or what
// it waits for, or how far it got.
func progressLine(taskID string, p workflows.Progress, now time.Time) string {
	head := fmt.Sprintf("%s task %s %s", now.UTC().Format(time.TimeOnly), taskID, p.Status)
	switch {
	case len(p.NeedsHuman) > 0:
		labels := make([]string, len(p.NeedsHuman))
		for i, id := range p.NeedsHuman {
			labels[i] = shortLine(taskID, id)
		}
		return fmt.Sprintf("%s: waits for a person to resolve %s (starter status %s)", head, strings.Join(labels, ", "), taskID)
	case p.Waiting != "":
		return head + ": " + p.Waiting
	}
	if n := len(p.Attempts); n > 0 && p.Retry != nil && p.Retry.AttemptID == p.Attempts[n-1].AttemptID && p.Retry.Until.After(now) {
		return fmt.Sprintf("%s: %s abandoned, %s", head, shortAttempt(taskID, p.Retry.AttemptID), retryNotice(*p.Retry, now))
	}
	return fmt.Sprintf("%s: %d model attempts, %d operations so far", head, len(p.Attempts), len(p.Operations))
}
