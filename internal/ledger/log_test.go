package ledger_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/ledger"
)

func TestLogStaleFence(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&buf, nil))
	cur := ledger.Operation{ID: "op-1", State: capstan.OutcomeSucceeded, Fence: 3}

	ledger.LogStaleFence(context.Background(), log, "release", cur, 3, errors.New("operation is RUNNING"))
	if buf.Len() != 0 {
		t.Fatalf("a refusal that is not ErrFenced was logged: %s", buf.String())
	}

	refusal := fmt.Errorf("the claim already ended in SUCCEEDED: %w", ledger.ErrFenced)
	ledger.LogStaleFence(context.Background(), log, "complete", cur, 2, refusal)
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("want one JSON record, got %q: %v", buf.String(), err)
	}
	want := map[string]any{"level": "WARN", "msg": "ledger rejected a stale-fence write", "op": "complete",
		"operation_id": "op-1", "fence": float64(2), "current_fence": float64(3), "state": "succeeded",
		"reason": refusal.Error()}
	for k, v := range want {
		if rec[k] != v {
			t.Errorf("%s = %v, want %v (record %s)", k, rec[k], v, buf.String())
		}
	}
}
