package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/tool"
)

// readBackResolution reads a person's found back through the lookup of the
// operation's kind (tool.ReadBack) before anything is recorded, so that no
// URL is accepted that is not an effect of the operation's kind in its
// repository, as it exists now. It returns in with the found's ExternalID
// in the form the tool records, or refusal: why the URL is not accepted —
// not the operation's kind of effect, another repository, nothing there,
// or a question that could not be asked (GitHub down): then nothing is
// accepted and the person may try again. An absent, and a found for a kind
// whose lookup cannot read a URL back, pass as given. An error is a
// failure to read the operation's arguments, retried.
func (a *Activities) readBackResolution(ctx context.Context, in contract.ReconcileInput, op ledger.Operation) (contract.ReconcileInput, string, error) {
	r := in.Resolution
	if r == nil || r.Verdict != capstan.VerdictFound {
		return in, "", nil
	}
	q, err := a.question(ctx, in, op, a.Now(), 0)
	if err != nil {
		return in, "", err
	}
	e, err := a.Reconcilers.Effect(op.Kind, q.Sent)
	switch {
	case errors.Is(err, reconcilers.ErrNoReconciler):
		return in, "", nil // nothing knows this kind: only the person can tell
	case err != nil:
		return in, fmt.Sprintf("capstan could not read %s back to check it (%v); nothing was accepted", r.ExternalID, err), nil
	}
	rb, ok := e.(tool.ReadBack)
	if !ok {
		return in, "", nil
	}
	obs, err := rb.ReadBack(ctx, r.ExternalID)
	switch {
	case err != nil:
		return in, fmt.Sprintf("capstan could not read %s back to check it (%v); nothing was accepted, try again", r.ExternalID, err), nil
	case obs.Outcome != tool.Found:
		return in, fmt.Sprintf("%s is not the operation's effect: %s", r.ExternalID, obs.Detail), nil
	}
	checked := *r
	checked.ExternalID = obs.ExternalID
	in.Resolution = &checked
	return in, "", nil
}

// refuseResolution answers a person's found that was not accepted: the
// operation still needs a person, for the reason given. An operation taken
// for reconciliation is handed back as it was.
func (a *Activities) refuseResolution(ctx context.Context, op ledger.Operation, refusal string, taken bool) (contract.ReconcileResult, error) {
	res := contract.ReconcileResult{OperationID: op.ID, Verdict: capstan.VerdictIndeterminate, State: capstan.OutcomeNeedsHuman, Reason: refusal}
	if taken {
		cause := temporal.NewNonRetryableApplicationError(refusal, contract.ErrTypeInvalidResolution, nil)
		if err := a.handBack(ctx, op, cause); err != cause {
			return res, err
		}
	}
	a.Logger.InfoContext(ctx, "a person's found was not accepted", "operation_id", op.ID, "kind", op.Kind, "reason", refusal)
	return res, nil
}
