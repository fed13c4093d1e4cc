package workflows

import (
	"fmt"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/model"
)

// TestRetryWaitOfReadsTheGuardsJournalLine: the progress query finds the
// retry of the last abandoned attempt in the line runTurn journals, with
// its countdown's end and the budget it spent, and nothing once a later
// line says otherwise.
func TestRetryWaitOfReadsTheGuardsJournalLine(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 14, 3, 22, 0, time.UTC)
	note := func(format string, args ...any) string {
		return at.Format(time.RFC3339) + " " + fmt.Sprintf(format, args...)
	}
	// The same format as runTurn's note.
	retry := note("%s abandoned (%s); retrying in %s: %s", "x/t1/a1", model.OutcomeCutIdle, time.Second, "the stream was silent for 3s (idle 1/1)")
	journal := []string{note("x/t0/a1 completed: 1 tool call(s), 0 characters"), retry}

	got := retryWaitOf(journal, "x/t1/a1")
	want := RetryWait{AttemptID: "x/t1/a1", Outcome: model.OutcomeCutIdle, Reason: "the stream was silent for 3s",
		Budget: "idle", Spent: 1, Of: 1, Delay: time.Second, Until: at.Add(time.Second)}
	if got == nil || *got != want {
		t.Fatalf("retryWaitOf = %+v, want %+v", got, want)
	}
	if got := retryWaitOf(journal, "x/t1/a10"); got != nil {
		t.Errorf("retryWaitOf(another attempt) = %+v, want nil", got)
	}
	gaveUp := append(journal, note("%s abandoned (%s); giving up: %s", "x/t1/a2", model.OutcomeCutIdle, "again"))
	if got := retryWaitOf(gaveUp, "x/t1/a2"); got != nil {
		t.Errorf("retryWaitOf(an attempt given up) = %+v, want nil", got)
	}
	breaker := append(journal, note("waiting 24s for breaker model/openai: model attempt x/t1/a3 was not sent (no retry budget spent)"))
	if got := retryWaitOf(breaker, "x/t1/a3"); got != nil {
		t.Errorf("retryWaitOf(a breaker wait) = %+v, want nil", got)
	}
}
