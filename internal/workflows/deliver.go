package workflows

import (
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
)

// maxDeliveryTries is how often a delivery is sent before it is
// dead-lettered (docs/design.md §6): Temporal's tries of one Deliver, and
// the sends after a reconciler confirmed an earlier one absent — past which,
// since changeAbsentDeliveriesRetried, an absent one is sent again with
// backoff until the task's dependency outage limit.
const maxDeliveryTries = 3

// target is where a task's final answer goes: a Slack channel, or a comment
// on a GitHub issue or pull request.
type target struct {
	slack   string
	comment *contract.CommentTarget
}

// targets lists the task's delivery targets: its Slack channel first, then
// its comments, in the order they were given.
func (t *task) targets() []target {
	var ts []target
	if t.in.SlackChannel != "" {
		ts = append(ts, target{slack: t.in.SlackChannel})
	}
	for i := range t.in.Comments {
		ts = append(ts, target{comment: &t.in.Comments[i]})
	}
	return ts
}

// name is the target as DeliveryRecord.Target shows it.
func (d target) name() string {
	if d.comment != nil {
		return fmt.Sprintf("github:%s#%d", d.comment.Repo, d.comment.Number)
	}
	return "slack:" + d.slack
}

// dependency names the service a delivery to d depends on.
func (d target) dependency() string {
	if d.comment != nil {
		return "github"
	}
	return "slack"
}

// label is the target in a sentence.
func (d target) label() string {
	if d.comment != nil {
		return fmt.Sprintf("GitHub %s#%d", d.comment.Repo, d.comment.Number)
	}
	return "Slack " + d.slack
}

// deliver sends the final answer to each of the task's targets, in order.
// "final response committed" and "delivery acked" are separate journal
// lines: the answer is part of the task's result whether or not it lands.
func (t *task) deliver(ctx workflow.Context, text string) error {
	first := len(t.result.Deliveries)
	targets := t.targets()
	for _, d := range targets {
		t.result.Deliveries = append(t.result.Deliveries, DeliveryRecord{
			OperationID: deliveryOperationID(t.in.Tenant, t.in.TaskID, t.scope, d), Target: d.name(), State: capstan.OutcomeDeclared})
	}
	for i, d := range targets {
		if err := t.deliverTo(ctx, &t.result.Deliveries[first+i], d, text); err != nil {
			return err
		}
	}
	return nil
}

func (t *task) deliverTo(ctx workflow.Context, rec *DeliveryRecord, d target, text string) error {
	rec.Tries = 1
	unknown, err := t.post(ctx, rec, d, text)
	if err != nil || unknown == "" {
		return err
	}
	rec.State = capstan.OutcomeUnknown
	if !t.reconciles(ctx) {
		return fail(FailOperationUnknown, "the delivery to %s may have been posted: %s", d.label(), unknown)
	}
	_, err = t.recover(ctx, t.deliveryEffect(rec, d, text), unknown)
	return err
}

// post runs one Deliver (with Temporal's retries) and settles its record.
// An outcome nobody knows is returned as unknown; a cancellation records
// what the delivery is known to be; every other failure dead-letters the
// delivery and ends the task.
func (t *task) post(ctx workflow.Context, rec *DeliveryRecord, d target, text string) (unknown string, err error) {
	rec.State = capstan.OutcomeRunning
	var res contract.DeliverResult
	for {
		actx := workflow.WithActivityOptions(ctx, deliverOptions("deliver to "+strings.ToLower(d.label()), t.in.ModelLimits, t.waitsOnBreakers(ctx)))
		err = workflow.ExecuteActivity(actx, contract.ActivityDeliver, contract.DeliverInput{
			Tenant: t.in.Tenant, TaskID: t.in.TaskID, Scope: t.scope, OperationID: rec.OperationID, Channel: d.slack, Comment: d.comment, Text: text,
		}).Get(ctx, &res)
		// A delivery an open breaker kept from being sent is waited for
		// and sent again; it spends none of its tries.
		w, open := contract.BreakerWaitOf(err)
		if !open || ctx.Err() != nil || !t.waitsOnBreakers(ctx) {
			break
		}
		if err := t.waitForBreaker(ctx, w.Breaker, w.Wait, w.OutageLimit, "delivery "+rec.OperationID); err != nil {
			rec.State = capstan.OutcomeAbsent // cancelled, or the ledger stayed down, while it waited: nothing was sent
			return "", err
		}
	}
	if err == nil {
		t.ledgerBack()
		rec.State, rec.ExternalID = capstan.OutcomeSucceeded, res.ExternalID
		t.note(ctx, "delivery %s acked (%s)", rec.OperationID, res.ExternalID)
		return "", nil
	}
	if ctx.Err() != nil {
		rec.State, _ = cancelledState(err)
		return "", err
	}
	var timeoutErr *temporal.TimeoutError
	switch {
	case contract.IsOperationUnknown(err) || contract.IsOperationInProgress(err):
		return contract.Describe(err), nil
	case contract.IsOperationConflict(err):
		t.deadLetter(ctx, rec)
		return "", fail(FailOperationConflict, "%s", contract.Describe(err))
	case contract.IsWorkerConfig(err):
		t.deadLetter(ctx, rec)
		return "", fail(FailWorkerMisconfigured, "%s", contract.Describe(err))
	case errors.As(err, &timeoutErr) && t.reconciles(ctx):
		// The worker was lost while it posted: the message may be there.
		return fmt.Sprintf("the worker delivering to %s stopped answering (%s timeout)", d.label(), timeoutErr.TimeoutType()), nil
	}
	t.deadLetter(ctx, rec)
	return "", fail(FailDeliveryFailed, "the final answer could not be delivered to %s: %v", d.label(), err)
}

// deadLetter gives up on a delivery: it failed. Tasks that reconcile also mark it in
// their search attributes, so dead letters can be found
// (CapstanFlags holds dead_letter; CapstanDeadLetter = true before
// changeSearchFlags).
func (t *task) deadLetter(ctx workflow.Context, rec *DeliveryRecord) {
	rec.State = capstan.OutcomeFailed
	if t.reconciles(ctx) {
		_ = workflow.UpsertTypedSearchAttributes(ctx, t.flagUpdate(ctx, FlagDeadLetter, true))
	}
}

// deliveryEffect is a delivery as recover sees it: re-sent after a
// confirmed absent until maxDeliveryTries sends; then, since
// changeAbsentDeliveriesRetried, sent again with backoff until the task's
// dependency outage limit (its dependency: slack or github), and only then
// dead-lettered; before that change, dead-lettered at once.
func (t *task) deliveryEffect(rec *DeliveryRecord, d target, text string) effect {
	in := contract.ReconcileInput{OperationID: rec.OperationID, Channel: d.slack}
	if d.comment != nil {
		in.Arguments = ledger.ItemRef(contract.CommentArguments(*d.comment, text))
	}
	return effect{
		opID:         rec.OperationID,
		summary:      "delivery to " + strings.ToLower(d.label()),
		input:        in,
		reexecutions: maxDeliveryTries - 1,
		delivery:     true,
		dependency:   d.dependency(),
		execute: func(ctx workflow.Context) (string, string, error) {
			unknown, err := t.post(ctx, rec, d, text)
			if err == nil && unknown != "" {
				rec.State = capstan.OutcomeUnknown
			}
			return "", unknown, err
		},
		found: func(r contract.ReconcileResult) {
			rec.State, rec.ExternalID, rec.Recovered = capstan.OutcomeSucceeded, r.ExternalID, true
		},
		reconciling: func() { rec.State = capstan.OutcomeReconciling },
		absent:      func(r contract.ReconcileResult, n int) { rec.State, rec.Tries = capstan.OutcomeAbsent, n+1 },
		needsPerson: func(string) { rec.State = capstan.OutcomeNeedsHuman },
		exhausted: func(ctx workflow.Context, r contract.ReconcileResult) error {
			t.deadLetter(ctx, rec)
			return fail(FailDeliveryFailed, "the final answer could not be delivered to %s after %d tries: %s", d.label(), rec.Tries, r.Reason)
		},
	}
}
