package capstan

import (
	"fmt"
	"slices"
)

// Outcome is what is known about an effect — a tool call's operation or the
// delivery of a task's answer — at one moment (docs/design.md §5.3, §6). The
// ledger records it per operation, activities return it, and a task's result
// shows it per operation and delivery.
//
// Only some outcomes are knowledge of what happened (Known); the others say
// that the request may be on its way, or may have acted, and that somebody —
// a reconciler or a person — must still find out.
type Outcome string

// Outcomes, in the order an effect usually passes through them.
const (
	// OutcomeDeclared: the workflow named the operation; nothing was claimed
	// or sent.
	OutcomeDeclared Outcome = "declared"
	// OutcomeClaimed: a worker holds the ledger's claim on the operation and
	// has sent nothing yet (it marks the operation running just before it
	// sends).
	OutcomeClaimed Outcome = "claimed"
	// OutcomeNotSent: the call proved that no request reached the external
	// system (the dial, DNS or TLS failed, or a rate limit refused it); it
	// may be sent again with the same operation id.
	OutcomeNotSent Outcome = "not_sent"
	// OutcomeRunning: the request may be on the wire.
	OutcomeRunning Outcome = "running"
	// OutcomeSucceeded: the effect happened, and its external id is known.
	OutcomeSucceeded Outcome = "succeeded"
	// OutcomeFailed: the external system refused the request, or capstan
	// gave up on it (a dead-lettered delivery); nothing happened, and
	// repeating the same request would fail again.
	OutcomeFailed Outcome = "failed"
	// OutcomeAbsent: the effect certainly does not exist — nothing was sent,
	// or a reconciler or a person confirmed it absent — and the operation
	// may be executed again with the same id.
	OutcomeAbsent Outcome = "absent"
	// OutcomeUnknown: the request may have reached the external system and
	// nobody knows whether it acted. It must be reconciled, never blindly
	// retried.
	OutcomeUnknown Outcome = "unknown"
	// OutcomeReconciling: unknown, and a reconciler is asking the external
	// system right now.
	OutcomeReconciling Outcome = "reconciling"
	// OutcomeNeedsHuman: unknown, and no reconciler can tell; a person
	// decides (starter resolve).
	OutcomeNeedsHuman Outcome = "needs_human"
	// OutcomeCancelled: the caller stopped waiting for the call (its context
	// was cancelled). Like unknown it proves nothing about the request; it
	// says nothing about the external system's health either.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeAwaitingApproval: the task's policy requires a person's
	// approval of the operation (docs/design.md §5.9) and nobody has given
	// it yet; nothing was claimed or sent. Only a task's result shows it:
	// the ledger never holds it.
	OutcomeAwaitingApproval Outcome = "awaiting_approval"
	// OutcomeDenied: a person denied the approval the operation waited for,
	// or nobody gave it in time; nothing was sent, and nothing will be for
	// the same effect in this task. Only a task's result shows it.
	OutcomeDenied Outcome = "denied"
)

// outcomes is every Outcome, for ParseOutcome and the tests.
var outcomes = []Outcome{
	OutcomeDeclared, OutcomeClaimed, OutcomeNotSent, OutcomeRunning, OutcomeSucceeded, OutcomeFailed,
	OutcomeAbsent, OutcomeUnknown, OutcomeReconciling, OutcomeNeedsHuman, OutcomeCancelled,
	OutcomeAwaitingApproval, OutcomeDenied,
}

// Outcomes returns every Outcome.
func Outcomes() []Outcome { return append([]Outcome(nil), outcomes...) }

// oldSpellings are the strings releases before the one vocabulary wrote for
// an outcome, and what each meant. Ledger rows carry the ledger's states
// (DECLARED … NEEDS_HUMAN); recorded histories and task results also carry
// the delivery states (PENDING … DEAD_LETTER). They are read, never written.
var oldSpellings = map[string]Outcome{
	"DECLARED":    OutcomeDeclared,
	"CLAIMED":     OutcomeClaimed,
	"RUNNING":     OutcomeRunning,
	"SUCCEEDED":   OutcomeSucceeded,
	"FAILED":      OutcomeFailed,
	"ABSENT":      OutcomeAbsent,
	"UNKNOWN":     OutcomeUnknown,
	"NEEDS_HUMAN": OutcomeNeedsHuman,
	// Delivery states.
	"PENDING":         OutcomeDeclared,
	"SENDING":         OutcomeRunning,
	"ACKED":           OutcomeSucceeded,
	"AMBIGUOUS":       OutcomeUnknown,
	"RECONCILING":     OutcomeReconciling,
	"RETRY_SCHEDULED": OutcomeAbsent,
	"DEAD_LETTER":     OutcomeFailed,
}

// OldSpellings returns the strings an older release wrote for o, which
// ParseOutcome still reads as o: for a query that must match rows written
// before and after the change.
func (o Outcome) OldSpellings() []string {
	var old []string
	for s, meant := range oldSpellings {
		if meant == o {
			old = append(old, s)
		}
	}
	slices.Sort(old)
	return old
}

// ParseOutcome reads an outcome as written by this release or an older one
// (whose spellings it maps to the outcome they meant). An empty string is
// the zero Outcome; any other string it does not know is an error.
func ParseOutcome(s string) (Outcome, error) {
	if s == "" {
		return "", nil
	}
	for _, o := range outcomes {
		if string(o) == s {
			return o, nil
		}
	}
	if o, ok := oldSpellings[s]; ok {
		return o, nil
	}
	return Outcome(s), fmt.Errorf("capstan: %q is not an outcome", s)
}

// UnmarshalText reads o as ParseOutcome does, so JSON written by an older
// release (an activity result in a recorded history, a task's result, a
// checkpoint carried across continue-as-new) decodes to today's words. A
// string it does not know decodes as itself rather than failing the
// payload — a workflow task must not fail on a word a newer worker wrote —
// and such an outcome is never Known.
func (o *Outcome) UnmarshalText(b []byte) error {
	*o, _ = ParseOutcome(string(b))
	return nil
}

// String is the outcome's one spelling.
func (o Outcome) String() string { return string(o) }

// Known reports whether o is knowledge of what happened to the effect: it
// happened (succeeded), it did not (not_sent, failed, absent, denied), or
// nothing was attempted yet (declared, claimed, awaiting_approval: nothing
// is sent before a person approves). Every other outcome — running,
// unknown, reconciling, needs_human, cancelled, or a word this release
// does not know — means the effect may have happened without anyone
// knowing, so a task never ends with such an effect unlisted.
func (o Outcome) Known() bool {
	switch o {
	case OutcomeDeclared, OutcomeClaimed, OutcomeNotSent, OutcomeSucceeded, OutcomeFailed, OutcomeAbsent,
		OutcomeAwaitingApproval, OutcomeDenied:
		return true
	}
	return false
}
