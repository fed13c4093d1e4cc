package activities

import (
	"context"
	"errors"
)

// Reconcile is a placeholder until the reconcilers land on this branch.
func (a *Activities) Reconcile(ctx context.Context, in ReconcileInput) (ReconcileResult, error) {
	return ReconcileResult{}, errors.New("not built")
}
