package workflows

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/backoff"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/contract"
)

// This file is what a task does with a conditional or idempotent tool
// write that a reconciler keeps confirming absent
// (changeAbsentWritesRetried), and with a delivery likewise
// (changeAbsentDeliveriesRetried, dead-lettered at the limit): capstan knows the effect did not happen,
// and the service keeps a repeat from making a second one, so it is not a
// question for a person. It is a dependency
// that keeps failing, and is treated as one: executed again with the same
// operation id after a jittered backoff, for as long as the task's
// dependency outage limit, then the task fails dependency_unavailable.

// absentBackoff paces the executions of a write confirmed absent once its
// re-executions are spent: 1 s doubling to 5 min, full jitter.
var absentBackoff = backoff.Policy{Base: time.Second, Cap: 5 * time.Minute, Multiplier: 2}

// retriesAbsent reports whether e, confirmed absent with its re-executions
// spent, is executed again rather than put to a person.
func (t *task) retriesAbsent(ctx workflow.Context, e effect) bool {
	change := changeAbsentWritesRetried
	if e.delivery {
		change = changeAbsentDeliveriesRetried
	}
	return e.dependency != "" &&
		t.since(ctx, change)
}

// backOffAbsent waits before the n-th execution of e beyond its
// re-executions, journalled and in the current details; or, when that
// execution would come later than the task's outage limit after first (when
// e was first unknown), fails the task dependency_unavailable — a delivery
// through its exhausted hook: dead-lettered, delivery_failed.
func (t *task) backOffAbsent(ctx workflow.Context, e effect, r contract.ReconcileResult, n int, first time.Time) error {
	limit := t.in.DependencyOutageLimit
	if limit <= 0 {
		limit = config.DefaultDependencyOutageLimit
	}
	var j float64
	if err := workflow.SideEffect(ctx, func(workflow.Context) any { return rand.Float64() }).Get(&j); err != nil {
		return err
	}
	d := absentBackoff.Delay(n, 0, j)
	now := workflow.Now(ctx)
	if giveUp := first.Add(limit); now.Add(d).After(giveUp) {
		if e.exhausted != nil { // a delivery: dead-lettered, as when its tries were all it had
			e.absent(r, e.reexecutions+n-1) // the execution counted for this wait never happens
			return e.exhausted(ctx, r)
		}
		return fail(FailDependencyUnavailable, "%s kept failing: operation %s was confirmed not to have happened after each of its %d executions in %s (the task's limit, CAPSTAN_DEPENDENCY_OUTAGE_LIMIT, is %s); the last: %s",
			e.dependency, e.opID, e.reexecutions+n, roundWait(now.Sub(first)), limit, r.Reason)
	}
	until := now.Add(d)
	t.note(ctx, "operation %s is absent again (%s): %s keeps failing; executing it again with the same id in %s (execution %d; gives up at %s)",
		e.opID, r.Reason, e.dependency, roundWait(d), e.reexecutions+n+1, first.Add(limit).UTC().Format("15:04:05 MST"))
	t.result.Waiting = fmt.Sprintf("waiting %s to execute operation %s again: %s keeps failing (until %s)", roundWait(d), e.opID, e.dependency, until.UTC().Format("15:04:05 MST"))
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("**%s keeps failing**: operation %s (%s) did not happen; it is executed again with the same id at %s. The task gives up at %s.",
		e.dependency, e.opID, e.summary, until.UTC().Format(time.RFC3339), first.Add(limit).UTC().Format(time.RFC3339)))
	err := workflow.Sleep(ctx, d)
	t.result.Waiting = ""
	workflow.SetCurrentDetails(ctx, "")
	return err
}

// absentRetried is the dependency of a call whose confirmed absence is
// retried rather than put to a person: a conditional or idempotent write,
// whose service itself keeps a repeat from making a second effect. An
// unsafe write's "absent" rests on a list that may lag past the window, so
// after its re-executions a person still decides: "" for it.
func absentRetried(c contract.ToolCallRef) string {
	switch capstan.Class(c.Class) {
	case capstan.ClassConditional, capstan.ClassIdempotent:
		return dependencyOf(c.Name)
	}
	return ""
}

// dependencyOf names the service a tool writes to, for the journal and the
// failure message: the part of its name before the first "_"
// (github_create_branch → github), or an MCP tool's server
// (mcp__tickets__create → mcp/tickets).
func dependencyOf(impl string) string {
	if rest, ok := strings.CutPrefix(impl, "mcp__"); ok {
		server, _, _ := strings.Cut(rest, "__")
		return "mcp/" + server
	}
	name, _, _ := strings.Cut(impl, "_")
	if name == "" {
		return impl
	}
	return name
}
