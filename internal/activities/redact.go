package activities

import (
	"context"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/redact"
)

// redactingLedger is l with the secrets of r masked in every error it
// records (ledger.Completion.Error): the column people read with `starter
// show` and the model is told about again, where a tool's failure quoting
// a configured URL or header would otherwise keep a key. Nil r is l.
func redactingLedger(l Ledger, r *redact.Redactor) Ledger {
	if r == nil {
		return l
	}
	return &maskedLedger{Ledger: l, r: r}
}

type maskedLedger struct {
	Ledger
	r *redact.Redactor
}

func (m *maskedLedger) Complete(ctx context.Context, c ledger.Completion) error {
	c.Error = m.r.String(c.Error)
	return m.Ledger.Complete(ctx, c)
}

// redactedFailure is err as the boundary hands it to Temporal, with the
// secrets of r masked in its message, its cause and its details: what the
// workflow records of a failure (an operation's reason, a task's message)
// is then already masked. An error that holds none is returned as it is.
// An application error that does is rebuilt with the same type,
// retryability, delay and category; a cause holding a secret becomes its
// masked text alone, since Temporal records every cause of the chain. Any
// other error holding one becomes its masked text.
func redactedFailure(r *redact.Redactor, err error) error {
	if r == nil || err == nil {
		return err
	}
	appErr, ok := err.(*temporal.ApplicationError)
	if !ok {
		return r.Error(err)
	}
	msg := r.String(appErr.Message())
	changed := msg != appErr.Message()
	cause := appErr.Unwrap()
	if masked := r.Error(cause); masked != cause {
		cause, changed = masked, true
	}
	var details []any
	if appErr.HasDetails() {
		// The activities give one detail at most (contract.AtBoundary).
		var d any
		if appErr.Details(&d) == nil {
			masked, held := redact.Value(r, d)
			details, changed = []any{masked}, changed || held
		}
	}
	if !changed {
		return err
	}
	return temporal.NewApplicationErrorWithOptions(msg, appErr.Type(), temporal.ApplicationErrorOptions{
		NonRetryable: appErr.NonRetryable(), NextRetryDelay: appErr.NextRetryDelay(), Category: appErr.Category(),
		Cause: cause, Details: details,
	})
}
