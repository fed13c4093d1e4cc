package backoff

import (
	"context"
	"time"
)

// Sleep waits d, or until ctx ends, whichever comes first, and returns
// ctx's error in the second case. It is the wait between two tries of a
// loop outside a workflow (a workflow sleeps with workflow.Sleep).
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
