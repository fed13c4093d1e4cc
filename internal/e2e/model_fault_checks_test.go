package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// attemptSummary is the outcomes of attempts, run-length encoded:
// "2× cut_idle".
func attemptSummary(attempts []workflows.AttemptRecord) string {
	var parts []string
	for i := 0; i < len(attempts); {
		j := i
		for j < len(attempts) && attempts[j].Outcome == attempts[i].Outcome {
			j++
		}
		if j-i > 1 {
			parts = append(parts, fmt.Sprintf("%d× %s", j-i, attempts[i].Outcome))
		} else {
			parts = append(parts, string(attempts[i].Outcome))
		}
		i = j
	}
	return strings.Join(parts, ", ")
}

// firstAbandoned is the first attempt that did not complete, or the first
// attempt when all did.
func firstAbandoned(attempts []workflows.AttemptRecord) workflows.AttemptRecord {
	for _, a := range attempts {
		if a.Outcome != model.OutcomeCompleted {
			return a
		}
	}
	return attempts[0]
}

// checkFaulted checks which requests a fault answered: a rule for every
// request struck them all, a rule for one request the first only (the
// overflow row: the third); and the steps they asked for.
func checkFaulted(t *testing.T, row mfaultRow, wire mfaultWire, requests []sandbox.ModelRequest) {
	t.Helper()
	want := make([]sandbox.FaultKind, len(requests))
	switch {
	case row.rules != nil:
		rule := row.rules(wire)[0]
		for i := range want {
			if rule.Times == 0 || i < rule.Times {
				want[i] = rule.Kind
			}
		}
	case row.overflowThirdTurn && len(want) > 2:
		want[2] = sandbox.FaultContextOverflow
	}
	var got, steps []string
	for _, r := range requests {
		got = append(got, string(r.Fault))
		steps = append(steps, fmt.Sprint(r.Step))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the faults that answered the requests = %q, want %q", got, want)
	}
	if row.want.steps != nil && strings.Join(steps, " ") != strings.Trim(fmt.Sprint(row.want.steps), "[]") {
		t.Errorf("the requests asked for steps %v, want %v", steps, row.want.steps)
	}
}

// checkAttempts compares the attempt records with the row's.
func checkAttempts(t *testing.T, row mfaultRow, attempts []workflows.AttemptRecord, dump func() string) {
	t.Helper()
	w := row.want
	if len(attempts) == 0 {
		t.Fatalf("no attempt recorded\n%s", dump())
	}
	first := firstAbandoned(attempts)
	if first.Phase != w.firstPhase || (w.firstHTTP != 0 && first.HTTPStatus != w.firstHTTP) {
		t.Errorf("first attempt = %+v, want phase %s, HTTP %d\n%s", first, w.firstPhase, w.firstHTTP, dump())
	}
	if row.reopen {
		// Refused until the port opened again, then answered.
		last := len(attempts) - 1
		if last < 1 || last > 4 || attempts[last].Outcome != model.OutcomeCompleted {
			t.Errorf("attempts = %+v, want 1 to 4 not_sent, then completed\n%s", attempts, dump())
		}
		for _, a := range attempts[:max(last, 0)] {
			if a.Outcome != model.OutcomeNotSent || a.Phase != model.PhaseNotSent {
				t.Errorf("attempt %+v before the port opened: want not_sent at NOT_SENT", a)
			}
		}
		return
	}
	got := make([]model.Outcome, len(attempts))
	for i, a := range attempts {
		got[i] = a.Outcome
	}
	if fmt.Sprint(got) != fmt.Sprint(w.outcomes) {
		t.Errorf("attempt outcomes = %v, want %v\n%s", got, w.outcomes, dump())
	}
	// Abandoned attempts of one turn share the phase of the first.
	for _, a := range attempts[1:] {
		if a.Outcome == first.Outcome && a.Outcome != model.OutcomeCompleted && a.Phase != first.Phase {
			t.Errorf("attempt %+v: phase %s, want %s as the first", a, a.Phase, first.Phase)
		}
	}
}

// checkTranscript reads the last request the sandbox model received — the
// whole transcript the task had committed by then — and checks that no
// committed item of it (an answer, a tool result) repeats, and that nothing
// of an abandoned attempt is in it.
func checkTranscript(t *testing.T, sb *sandbox.Sandbox, w mfaultWant, dump func() string) {
	t.Helper()
	last := sb.Model.LastRequest()
	if w.requests == 0 {
		if last != nil {
			t.Errorf("the sandbox model kept a request body although it counted none: %s", last)
		}
		return
	}
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(last, &req); err != nil || len(req.Messages) == 0 {
		t.Fatalf("the last model request has no messages (%v): %s", err, last)
	}
	seen := map[string]int{}
	for i, m := range req.Messages {
		// Committed items are the model's answers and the tool results;
		// the user messages the workflow adds (the prompt, a request to
		// continue a cut answer) may say the same thing twice.
		var item struct {
			Role string `json:"role"`
		}
		if err := json.Unmarshal(m, &item); err != nil {
			t.Fatal(err)
		}
		if item.Role == "user" && !strings.Contains(string(m), `"tool_result"`) {
			continue
		}
		var c bytes.Buffer
		if err := json.Compact(&c, m); err != nil {
			t.Fatal(err)
		}
		if j, ok := seen[c.String()]; ok {
			t.Errorf("transcript items %d and %d are the same: %s\n%s", j, i, c.String(), dump())
		}
		seen[c.String()] = i
	}
	if w.partial != "" && strings.Contains(string(last), w.partial) {
		t.Errorf("the abandoned attempt's text %q reached the transcript:\n%s", w.partial, last)
	}
}

// checkDelivery checks what reached Slack: for a completed task, the final
// answer, exactly and once, with the abandoned text no more often than the
// answer itself has it; for a failed one, nothing.
func checkDelivery(t *testing.T, sb *sandbox.Sandbox, res workflows.TaskResult, w mfaultWant) {
	t.Helper()
	msgs := sb.Slack.Messages(mfaultChannel)
	if w.status != workflows.StatusCompleted {
		if len(msgs) != 0 || len(res.Deliveries) != 0 {
			t.Errorf("a failed task delivered %+v (records %+v), want nothing", msgs, res.Deliveries)
		}
		return
	}
	if res.FinalText != w.final {
		t.Errorf("final text = %q, want %q", res.FinalText, w.final)
	}
	if len(msgs) != 1 || len(res.Deliveries) != 1 || res.Deliveries[0].State != capstan.OutcomeSucceeded {
		t.Fatalf("slack messages = %+v, deliveries = %+v; want one message, succeeded", msgs, res.Deliveries)
	}
	text := msgs[0].Text
	if text != w.final || strings.Count(text, w.final) != 1 {
		t.Errorf("delivered %q, want the final answer %q exactly once", text, w.final)
	}
	if w.partial != "" && strings.Count(text, w.partial) != strings.Count(w.final, w.partial) {
		t.Errorf("the abandoned attempt's text %q reached the delivery: %q", w.partial, text)
	}
}

// waitForAttempt polls the task's status until an attempt has ended with
// outcome: the status query answers what the task has done so far, and
// there is no event to wait on.
func waitForAttempt(t *testing.T, taskID string, outcome model.Outcome) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, err := temporal.QueryWorkflow(ctx, workflows.WorkflowID(taskID), "", workflows.QueryStatus)
		cancel()
		if err == nil {
			var st workflows.TaskResult
			if err := v.Get(&st); err != nil {
				t.Fatal(err)
			}
			for _, turn := range st.Turns {
				for _, a := range turn.Attempts {
					if a.Outcome == outcome {
						return
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s recorded no %s attempt within a minute (last query error: %v)", taskID, outcome, err)
		}
		<-poll.C
	}
}

// overflowThirdTurn is a sandbox Fault that lets every request through and,
// on the first request with one assistant message (the second turn's), adds
// a context_overflow rule for requests longer than it: the third turn's
// request, which carries one more exchange, overflows once; the compaction's
// summary call, which carries no tools, and the third turn asked again,
// after the rule is spent, do not.
func overflowThirdTurn(t *testing.T, m *sandbox.Model, wire mfaultWire) sandbox.Fault {
	var once sync.Once
	return func(_ http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read a model request: %v", err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		if json.Unmarshal(body, &req) != nil {
			return false
		}
		assistants := 0
		for _, msg := range req.Messages {
			if msg.Role == "assistant" {
				assistants++
			}
		}
		if assistants == 1 {
			once.Do(func() {
				if err := m.AddFault(sandbox.FaultRule{Endpoint: wire.endpoint, Kind: sandbox.FaultContextOverflow, Times: 1,
					PromptBytesOver: len(body)}); err != nil {
					t.Errorf("add the overflow rule: %v", err)
				}
			})
		}
		return false
	}
}
