package activities

import (
	"context"
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/ledger"
)

// begin takes an operation for this attempt (DESIGN §5.4 steps 1 and 3).
// When the ledger already holds it as SUCCEEDED, begin returns that record
// and done: nothing may be sent again. Otherwise the caller holds the claim
// under rec.Fence and the operation is RUNNING: from here on, a failure after
// the request may have left must be recorded UNKNOWN. Every other ending is
// returned as the application error the workflow expects.
func (a *Activities) begin(ctx context.Context, op ledger.Operation) (rec ledger.Operation, done bool, err error) {
	claim, err := a.Ledger.Claim(ctx, ledger.ClaimRequest{Op: op, Owner: a.owner(ctx), Lease: a.Lease})
	switch {
	case errors.Is(err, ledger.ErrConflict):
		return rec, false, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("operation %s was already used for a different %s request", op.ID, op.Kind), ErrTypeOperationConflict, err)
	case err != nil:
		return rec, false, fmt.Errorf("claim operation %s: %w", op.ID, err)
	}
	switch claim.Status {
	case ledger.AlreadySucceeded:
		return claim.Op, true, nil
	case ledger.InProgress:
		return rec, false, a.inProgress(op.ID, claim.Op)
	case ledger.MustReconcile:
		return rec, false, unknownOperation(op.ID, claim.Op.State, nil)
	}
	if err := a.Ledger.MarkRunning(ctx, op.ID, claim.Op.Fence); err != nil {
		return rec, false, fmt.Errorf("mark operation %s running: %w", op.ID, err)
	}
	return claim.Op, false, nil
}
