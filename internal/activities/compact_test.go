package activities_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// transcript stores msgs as committed items and their manifest, as
// ModelTurn does, and returns the manifest's reference.
func (f *fixture) transcript(t *testing.T, msgs ...model.Message) string {
	t.Helper()
	refs := make([]string, 0, len(msgs))
	for _, m := range msgs {
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, f.args(t, string(data)))
	}
	data, err := json.Marshal(map[string][]string{"items": refs})
	if err != nil {
		t.Fatal(err)
	}
	return f.args(t, string(data))
}

// messages loads the committed transcript a manifest names.
func (f *fixture) messages(t testing.TB, manifest string) []model.Message {
	t.Helper()
	refs, err := f.acts.ManifestRefs(context.Background(), manifest)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]model.Message, len(refs))
	for i, ref := range refs {
		data, err := f.ledger.GetItem(context.Background(), ref)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(data, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// overflowing is a transcript of two tool-using turns: the first exchange
// may be compacted, the opening and the newest exchange may not.
func overflowing() []model.Message {
	call := func(id string) []model.ToolCall {
		return []model.ToolCall{{ID: id, Name: githubtools.NameGetFile, Arguments: json.RawMessage(`{"repo":"acme/app","path":"README.md"}`)}}
	}
	return []model.Message{
		{Role: model.RoleSystem, Content: "You are a test.\nTask id: T"},
		{Role: model.RoleUser, Content: "read the README twice"},
		{Role: model.RoleAssistant, ToolCalls: call("call_1")},
		{Role: model.RoleTool, ToolCallID: "call_1", Content: strings.Repeat("a long README ", 1000)},
		{Role: model.RoleAssistant, ToolCalls: call("call_2")},
		{Role: model.RoleTool, ToolCallID: "call_2", Content: "the README again"},
	}
}

// A compaction is a model call of its own: it summarizes the oldest
// exchange, keeps the opening and the newest exchange, commits once, and
// never samples again.
func TestModelTurnCompactsTheOldestItems(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	msgs := overflowing()
	in := contract.ModelTurnInput{TaskID: "T", TurnID: "T/t3/k1", AttemptID: "T/t3/k1/a1", Model: "sandbox:hello",
		Transcript: f.transcript(t, msgs...), Compact: true}
	var out contract.ModelTurnResult
	v, err := f.env.ExecuteActivity(f.acts.ModelTurn, in)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Get(&out); err != nil {
		t.Fatal(err)
	}
	if out.Compacted != 2 || out.Text == "" || out.Phase != model.PhaseStreamCompleted {
		t.Fatalf("out = %+v, want the first exchange's 2 items summarized", out)
	}
	var sent struct {
		Messages []struct{ Role, Content string } `json:"messages"`
		Tools    []any                            `json:"tools"`
	}
	if err := json.Unmarshal(f.sb.Model.LastRequest(), &sent); err != nil {
		t.Fatal(err)
	}
	if len(sent.Messages) != 2 || len(sent.Tools) != 0 || !strings.Contains(sent.Messages[1].Content, "[tool call call_1: github_get_file") ||
		strings.Contains(sent.Messages[1].Content, "call_2") || !strings.Contains(sent.Messages[1].Content, "more characters left out") {
		t.Errorf("summary request = %+v, want the first exchange alone, shortened, without tools", sent)
	}
	got := f.messages(t, out.Transcript)
	if len(got) != 5 || got[0].Content != msgs[0].Content || got[1].Content != msgs[1].Content ||
		!strings.HasPrefix(got[2].Content, "[capstan: 2 earlier transcript items were replaced by this summary") ||
		got[3].ToolCalls[0].ID != "call_2" || got[4].ToolCallID != "call_2" {
		t.Errorf("compacted transcript = %+v, want opening, summary, newest exchange", got)
	}

	in.AttemptID = "T/t3/k1/a2"
	v, err = f.env.ExecuteActivity(f.acts.ModelTurn, in)
	if err != nil {
		t.Fatal(err)
	}
	var again contract.ModelTurnResult
	if err := v.Get(&again); err != nil {
		t.Fatal(err)
	}
	if !again.Replayed || again.Transcript != out.Transcript || f.sb.Model.Stats().Requests != 1 {
		t.Errorf("second compaction = %+v after %d requests, want the first, replayed, and one request", again, f.sb.Model.Stats().Requests)
	}
}

// With nothing between the opening and the newest exchange, a compaction
// sends nothing and says so.
func TestModelTurnHasNothingToCompact(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	in := contract.ModelTurnInput{TaskID: "T", TurnID: "T/t1/k1", AttemptID: "T/t1/k1/a1", Model: "sandbox:hello", Compact: true,
		Seed: []model.Message{{Role: model.RoleSystem, Content: "s"}, {Role: model.RoleUser, Content: strings.Repeat("huge prompt ", 100)}}}
	v, err := f.env.ExecuteActivity(f.acts.ModelTurn, in)
	if err != nil {
		t.Fatal(err)
	}
	var out contract.ModelTurnResult
	if err := v.Get(&out); err != nil {
		t.Fatal(err)
	}
	if out.Compacted != 0 || f.sb.Model.Stats().Requests != 0 {
		t.Errorf("out = %+v after %d requests, want nothing compacted and nothing sent", out, f.sb.Model.Stats().Requests)
	}
}

// When the summary call failed, the same items are removed behind a marker
// that says so; the newest exchange and the opening stay.
func TestTruncateTranscriptLeavesAMarker(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	msgs := overflowing()
	in := contract.TruncateInput{TaskID: "T", TurnID: "T/t3/k1", Transcript: f.transcript(t, msgs[:4]...),
		Append: []string{f.args(t, `{"role":"assistant","content":"a continuation"}`)}}
	v, err := f.env.ExecuteActivity(f.acts.TruncateTranscript, in)
	if err != nil {
		t.Fatal(err)
	}
	var out contract.TruncateResult
	if err := v.Get(&out); err != nil {
		t.Fatal(err)
	}
	got := f.messages(t, out.Transcript)
	if out.Removed != 2 || len(got) != 4 || !strings.HasPrefix(got[2].Content, "[capstan: 2 earlier transcript items were removed without a summary") ||
		got[3].Content != "a continuation" {
		t.Errorf("truncated = %d items, %+v; want the first exchange behind a marker, the appended item kept", out.Removed, got)
	}
	if f.sb.Model.Stats().Requests != 0 {
		t.Error("truncation called the model")
	}
}
