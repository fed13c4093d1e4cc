package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// checkSettlement checks that the faulted operation was settled the way the
// row demands, and says how in the table's words.
func checkSettlement(t *testing.T, row faultRow, res workflows.TaskResult, journal []string,
	sb *sandbox.Sandbox, seen, listSeen *requestWatch, faultAt time.Time,
) string {
	t.Helper()
	// logged reports whether a journal line says "operation <opID> <what>"
	// and holds every one of also.
	logged := func(opID, what string, also ...string) bool {
		return slices.ContainsFunc(journal, func(l string) bool {
			return strings.Contains(l, "operation "+opID+" "+what) &&
				!slices.ContainsFunc(also, func(s string) bool { return !strings.Contains(l, s) })
		})
	}
	if row.want == settleAny {
		return describeSettlement(journal)
	}
	if row.want == settleNormally {
		for _, l := range journal {
			if strings.Contains(l, " is unknown") {
				t.Errorf("without a fault, the journal says %q", l)
			}
		}
		return "completed"
	}

	// The faulted operation: a tool call, or the delivery.
	var opID, toolCallID string
	var recovered bool
	if impl, ok := toolOfEndpoint[row.endpoint]; ok {
		for _, op := range res.Operations {
			if op.Tool == impl {
				opID, toolCallID, recovered = op.OperationID, op.ToolCallID, op.Recovered
			}
		}
	} else if len(res.Deliveries) == 1 {
		opID, recovered = res.Deliveries[0].OperationID, res.Deliveries[0].Recovered
	}
	if opID == "" {
		t.Fatalf("no operation for %s in %+v, %+v", row.endpoint, res.Operations, res.Deliveries)
	}
	wasUnknown := logged(opID, "is unknown")
	wantUnknown := row.want == settleFound || row.want == settleResent || row.want == settleByPerson || row.want == settleSentAgain
	if wasUnknown != wantUnknown {
		t.Errorf("operation %s: journalled unknown = %v, want %v", opID, wasUnknown, wantUnknown)
	}
	for _, l := range journal {
		if _, why, ok := strings.Cut(l, "operation "+opID+" is unknown; reconciling: "); ok {
			t.Logf("%s was unknown because: %s", row.endpoint, why)
			// The killed worker's attempt never recorded an outcome: its
			// successor found the operation running under a lease that
			// had run out.
			if row.stop == syscall.SIGKILL && !strings.Contains(why, " is running") {
				t.Errorf("after SIGKILL the operation was unknown because %q, want it found running (nothing recorded)", why)
			}
		}
	}
	writes := seen.count(row.endpoint)

	switch row.want {
	case settleFound, settleByPerson:
		if !recovered || !logged(opID, "recovered") || logged(opID, "is absent") {
			t.Errorf("operation %s: recovered = %v, journal recovered = %v, absent = %v; want found by the reconciler, never absent",
				opID, recovered, logged(opID, "recovered"), logged(opID, "is absent"))
		}
		// A lagging list hides the effect from the first lookup: a
		// reconciler that may send again does, and GitHub refuses it
		// (422), which is no second effect (the counts above).
		if maxWrites := 1 + btoi(row.list != "" && resentByReconciler[row.endpoint]); writes < 1 || writes > maxWrites {
			t.Errorf("%s was requested %d times, want once (at most %d): a found effect is never made again", row.endpoint, writes, maxWrites)
		}
		if toolCallID != "" {
			if msg := toolMessage(t, sb, toolCallID); !strings.Contains(msg, `"recovered":true`) {
				t.Errorf("the model was not told %s was recovered: its tool message is %s", opID, msg)
			}
		}
		if row.want == settleByPerson {
			return "unknown → reconciler cannot list → waited for a person → starter resolve --found → completed"
		}
		how := "unknown → reconciler found it"
		if row.list != "" {
			asks := listSeen.countSince(row.list, faultAt)
			if asks < 2 {
				t.Errorf("%s was asked %d times after the fault, want at least 2: the lagging list should hide the effect at first", row.list, asks)
			}
			how += fmt.Sprintf(" on ask %d of %s", asks, row.list)
		}
		return how + " → completed"
	case settleSentAgain:
		if !recovered || !logged(opID, "recovered") || logged(opID, "is absent") {
			t.Errorf("operation %s: recovered = %v, journal absent = %v; want found by the reconciler's re-send, never absent",
				opID, recovered, logged(opID, "is absent"))
		}
		if writes != 2 {
			t.Errorf("%s was requested %d times, want 2 (the refused one, the reconciler's re-send)", row.endpoint, writes)
		}
		return "unknown → reconciler: none seen → sent again with the same id → found → completed"
	case settleResent:
		if recovered || !logged(opID, "is absent", "executing it again with the same id (1/") {
			t.Errorf("operation %s: recovered = %v, journal absent = %v; want absent, then executed again once", opID, recovered, logged(opID, "is absent"))
		}
		if writes != 2 {
			t.Errorf("%s was requested %d times, want 2 (the refused one, the one after the absent verdict)", row.endpoint, writes)
		}
		return "unknown → reconciler: absent after the window → sent again with the same id → completed"
	case settleAfterWait:
		times := seen.times(row.endpoint)
		if len(times) != 2 {
			t.Fatalf("%s was requested %d times, want 2 (refused, then sent)", row.endpoint, len(times))
		}
		gap := times[1].Sub(times[0])
		if gap < retryAfter {
			t.Errorf("%s was sent again %s after the refusal, before the %s the service asked for", row.endpoint, gap, retryAfter)
		}
		return fmt.Sprintf("rate limited, not sent → sent again %s later → completed", gap.Round(100*time.Millisecond))
	case settleReadBack, settleReadBackAbsent:
		msg := toolMessage(t, sb, toolCallID)
		readBackFound := strings.Contains(msg, `"recovered":true`)
		if readBackFound != (row.want == settleReadBack) {
			t.Errorf("tool message of %s = %s; want recovered = %v", opID, msg, row.want == settleReadBack)
		}
		if row.want == settleReadBack {
			if writes != 1 {
				t.Errorf("%s was requested %d times, want once", row.endpoint, writes)
			}
			return "answer lost → read back in the same attempt: in place → completed"
		}
		if writes != 2 {
			t.Errorf("%s was requested %d times, want 2 (the failed one, the retry)", row.endpoint, writes)
		}
		return "5xx → read back: not in place → written again (Temporal retry) → completed"
	}
	t.Fatalf("row %s: unknown settlement %d", row.name, row.want)
	return ""
}

// queryJournal reads the task's journal.
func queryJournal(t *testing.T, taskID string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v, err := temporal.QueryWorkflow(ctx, workflows.WorkflowID(taskID), "", workflows.QueryJournal)
	if err != nil {
		t.Fatalf("query the journal of %s: %v", taskID, err)
	}
	var lines []string
	if err := v.Get(&lines); err != nil {
		t.Fatal(err)
	}
	return lines
}

// toolMessage is the content of the tool message answering toolCallID in
// the model's last request.
func toolMessage(t *testing.T, sb *sandbox.Sandbox, toolCallID string) string {
	t.Helper()
	var req struct {
		Messages []struct {
			Role       string `json:"role"`
			ToolCallID string `json:"tool_call_id"`
			Content    any    `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(sb.Model.LastRequest(), &req); err != nil {
		t.Fatalf("the model's last request: %v", err)
	}
	for _, m := range req.Messages {
		if m.Role == "tool" && m.ToolCallID == toolCallID {
			return fmt.Sprint(m.Content)
		}
	}
	t.Fatalf("the model's last request has no tool message for %s", toolCallID)
	return ""
}
