package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/tool"
)

// newNotesTool is notesTool (newtool_test.go) as a user of package tool
// writes it: a function and its argument type, made a tool by tool.New,
// with the lookup as an option. It also says what project a note is for
// (Target.Attributes) and how a person is asked to approve one.
func newNotesTool(t *testing.T, url string) tool.Tool {
	type note struct {
		Text    string `json:"text"`
		Project string `json:"project,omitempty"`
	}
	type kept struct {
		ID int `json:"id"`
	}
	get := func(ctx context.Context) ([]string, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/notes", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		var notes []string
		return notes, json.NewDecoder(resp.Body).Decode(&notes)
	}
	tk, err := tool.New(notesPost, tool.Unsafe,
		func(ctx context.Context, call tool.Call, in note) (kept, error) {
			body, _ := json.Marshal(map[string]string{"text": in.Text + " " + noteMarker(call.OperationID)})
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url+"/notes", strings.NewReader(string(body)))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return kept{}, err // a dropped answer: tool.Classify says unknown
			}
			defer resp.Body.Close()
			var out kept
			return out, json.NewDecoder(resp.Body).Decode(&out)
		},
		tool.Description("Post a note."),
		tool.ExternalID(func(out kept) string { return fmt.Sprintf("note/%d", out.ID) }),
		tool.Lookup(func(ctx context.Context, s tool.Sent, in note) (tool.Observation, error) {
			notes, err := get(ctx)
			if err != nil {
				return tool.Observation{}, err
			}
			var ids []string
			for i, n := range notes {
				if strings.Contains(n, noteMarker(s.OperationID)) {
					ids = append(ids, fmt.Sprintf("note/%d", i+1))
				}
			}
			switch len(ids) {
			case 0:
				return tool.Observation{Outcome: tool.NotSeen, Detail: "no note carries the marker"}, nil
			case 1:
				return tool.Observation{Outcome: tool.Found, ExternalID: ids[0], Detail: ids[0] + " carries the marker"}, nil
			}
			return tool.Observation{Outcome: tool.Ambiguous, Detail: strings.Join(ids, ", ") + " carry the marker"}, nil
		}),
		tool.LookupKey(func(in note) string { return "a note carrying the operation's marker" }),
		tool.Targets(func(in note) tool.Target { return tool.Target{Attributes: map[string]string{"project": in.Project}} }),
		tool.ApprovalText(func(in note) string { return "post a note to " + in.Project + ": " + in.Text }),
	)
	if err != nil {
		t.Fatal(err)
	}
	return tk
}

// A tool made by tool.New goes through ExecuteTool under its operation id,
// which its function puts in the request; when the answer is lost the
// operation is unknown, and the reconciler finds the effect through the
// tool's own Lookup: one note, nothing posted again.
func TestAToolMadeByNewIsReconciledByItsLookup(t *testing.T) {
	t.Parallel()
	notes := &notesService{}
	srv := httptest.NewServer(notes)
	t.Cleanup(srv.Close)
	registry := tool.NewRegistry(newNotesTool(t, srv.URL))
	f := newFixture(t, func(d *activities.Deps) {
		d.Tools = registry
		d.Reconcilers = reconcilers.NewSet(registry) // as the worker builds it
	})
	in := contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", ToolCallID: "call_1",
		OperationID: "d:T:t1:" + notesPost + ":1", Tool: notesPost, Arguments: f.args(t, `{"text":"remember the milk"}`)}

	notes.set(true, false) // keep the note, drop the answer
	_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	expectAppError(t, "ExecuteTool with the answer dropped", err, contract.ErrTypeOperationUnknown)
	op, err := f.ledger.Get(context.Background(), in.OperationID)
	if err != nil || op.State != capstan.OutcomeUnknown || op.Kind != notesPost {
		t.Fatalf("after the dropped answer: %+v, %v; want an UNKNOWN notes_post operation", op, err)
	}

	notes.set(false, false)
	v, err := f.env.ExecuteActivity(f.acts.Reconcile, contract.ReconcileInput{Tenant: "d", TaskID: "T",
		OperationID: in.OperationID, ToolCallID: in.ToolCallID, Arguments: in.Arguments, Since: time.Now(), Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var res contract.ReconcileResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if res.Verdict != capstan.VerdictFound || res.State != capstan.OutcomeSucceeded || res.ExternalID != "note/1" || res.Asked != 1 {
		t.Errorf("Reconcile = %+v; want found note/1 at the first question", res)
	}
	if op, err := f.ledger.Get(context.Background(), in.OperationID); err != nil || op.State != capstan.OutcomeSucceeded || op.ExternalID != "note/1" {
		t.Errorf("ledger: %+v, %v; want SUCCEEDED note/1", op, err)
	}
	// The call again, as a retry would make it: replayed, not posted.
	in.ToolCallID = "call_1_again"
	v, err = f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatal(err)
	}
	var again contract.ExecuteToolResult
	_ = v.Get(&again)
	if again.State != capstan.OutcomeSucceeded || !again.Replayed || again.ExternalID != "note/1" {
		t.Errorf("the call again: %+v; want it replayed as note/1", again)
	}
	if notes.count() != 1 {
		t.Errorf("%d notes, want 1", notes.count())
	}
}

// A policy rule reads a tool's own attributes (tool.Target.Attributes) as
// `attributes`: it refuses a call of a tool made by tool.New, or makes it
// wait for a person, who is told what the call means in the tool's words
// (tool.ApprovalText); nothing is sent either way.
func TestPolicyRulesReadTheAttributesOfAToolMadeByNew(t *testing.T) {
	t.Parallel()
	notes := &notesService{}
	srv := httptest.NewServer(notes)
	t.Cleanup(srv.Close)
	registry := tool.NewRegistry(newNotesTool(t, srv.URL))
	f := newFixture(t, func(d *activities.Deps) {
		d.Tools = registry
		d.Reconcilers = reconcilers.NewSet(registry)
	})
	source := `rules:
  - name: no-ops-notes
    tool: notes_post
    when: attributes["project"] == "OPS"
    effect: deny
    reason: OPS takes no notes from tasks
  - name: finance-notes-need-a-person
    when: attributes[?"project"].orValue("") == "FIN"
    effect: require_approval
`
	tp := &contract.TaskPolicy{Tenant: "d", File: "policy.yaml", Source: source}
	call := func(n int, args string) contract.ExecuteToolInput {
		return contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", ToolCallID: fmt.Sprintf("call_%d", n),
			OperationID: fmt.Sprintf("d:T:t1:%s:%d", notesPost, n), Tool: notesPost, Arguments: f.args(t, args), Policy: tp, Approvals: true}
	}
	run := func(in contract.ExecuteToolInput) contract.ExecuteToolResult {
		t.Helper()
		v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
		if err != nil {
			t.Fatal(err)
		}
		var res contract.ExecuteToolResult
		_ = v.Get(&res)
		return res
	}

	denied := call(1, `{"text":"restart db-3","project":"OPS"}`)
	res := run(denied)
	if res.State != capstan.OutcomeFailed || res.Decision == nil || !res.Decision.Refused || res.Decision.Rule != "no-ops-notes" ||
		res.Decision.Reason != "OPS takes no notes from tasks" {
		t.Errorf("the OPS note: %+v (decision %+v); want it refused by no-ops-notes", res, res.Decision)
	}
	if _, err := f.ledger.Get(context.Background(), denied.OperationID); !errors.Is(err, ledger.ErrNotFound) {
		t.Errorf("the refused operation is in the ledger (%v); nothing should have been claimed", err)
	}

	waits := call(2, `{"text":"refund 40 EUR","project":"FIN"}`)
	res = run(waits)
	if res.State != capstan.OutcomeAwaitingApproval || res.Awaiting == nil || res.Awaiting.Summary != "post a note to FIN: refund 40 EUR" ||
		res.Decision == nil || res.Decision.Rule != "finance-notes-need-a-person" {
		t.Errorf("the FIN note: %+v (awaiting %+v, decision %+v); want it awaiting approval of \"post a note to FIN: refund 40 EUR\"",
			res, res.Awaiting, res.Decision)
	}

	allowed := run(call(3, `{"text":"remember the milk","project":"DEV"}`))
	if allowed.State != capstan.OutcomeSucceeded || allowed.ExternalID != "note/1" {
		t.Errorf("the DEV note: %+v; want it posted as note/1", allowed)
	}
	if notes.count() != 1 {
		t.Errorf("%d notes posted, want only the allowed one", notes.count())
	}
}
