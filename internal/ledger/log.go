package ledger

import (
	"context"
	"errors"
	"log/slog"
)

// LogStaleFence logs err, the refusal of a write by one of the Check rules,
// when it is ErrFenced: a stale fence is how an attempt that lost its claim
// (a zombie) shows itself, so every Store reports one the same way. verb
// names the write ("mark_running", "complete", "release"), fence is the one
// it presented and cur the operation as the store read it. Any other error is
// left to the caller to return; nothing is logged for it.
func LogStaleFence(ctx context.Context, log *slog.Logger, verb string, cur Operation, fence int64, err error) {
	if !errors.Is(err, ErrFenced) {
		return
	}
	log.WarnContext(ctx, "ledger rejected a stale-fence write", "op", verb,
		"operation_id", cur.ID, "fence", fence, "current_fence", cur.Fence,
		"state", string(cur.State), "reason", err.Error())
}
