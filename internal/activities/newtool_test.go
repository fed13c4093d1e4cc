package activities_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/reconcilers"
	"github.com/capstanhq/capstan/tool"
)

// Adding a tool means implementing it in one place. notesTool below is a
// tool of a service capstan has never heard of, written in this file only:
// once it is in the worker's registry, an outcome of it that is unknown is
// reconciled by the same activities, window and verdict rules as the
// built-in tools, through its own lookup (tool.Finder).

// notesService is a fake note-taking service on loopback. POST /notes
// keeps a note; GET /notes lists them. A POST may instead fail after the
// request was read, dropping the connection without an answer: with
// keepThenDrop the note is kept first (the effect happened, its answer was
// lost), with dropOnly it is not (nothing happened, and nobody can tell
// without looking).
type notesService struct {
	mu                     sync.Mutex
	notes                  []string
	keepThenDrop, dropOnly bool
}

func (s *notesService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodPost:
		var in struct{ Text string }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !s.dropOnly {
			s.notes = append(s.notes, in.Text)
		}
		if s.keepThenDrop || s.dropOnly {
			conn, _, _ := w.(http.Hijacker).Hijack()
			_ = conn.Close()
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]int{"id": len(s.notes)})
	default:
		_ = json.NewEncoder(w).Encode(s.notes)
	}
}

func (s *notesService) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.notes)
}

func (s *notesService) set(keepThenDrop, dropOnly bool) {
	s.mu.Lock()
	s.keepThenDrop, s.dropOnly = keepThenDrop, dropOnly
	s.mu.Unlock()
}

// notesTool posts a note carrying its operation's marker. It is unsafe: a
// post whose answer was lost must be found, not repeated.
type notesTool struct{ url string }

// notesPost is the tool's name.
const notesPost = "notes_post"

type noteArgs struct {
	Text string `json:"text"`
}

var noteSchema = tool.MustSchema(map[string]any{"type": "object", "required": []string{"text"},
	"additionalProperties": false, "properties": map[string]any{"text": map[string]any{"type": "string"}}})

// parse is the tool's one parser of its arguments.
func (notesTool) parse(raw json.RawMessage) (noteArgs, error) {
	var a noteArgs
	if err := noteSchema.Validate(raw); err != nil {
		return a, err
	}
	return a, json.Unmarshal(raw, &a)
}

func noteMarker(opID string) string { return "[capstan-op " + opID + "]" }

func (notesTool) Name() string         { return notesPost }
func (notesTool) Description() string  { return "Post a note." }
func (notesTool) Schema() *tool.Schema { return noteSchema }
func (notesTool) Class() tool.Class    { return tool.Unsafe }

func (t notesTool) Identify(raw json.RawMessage) (tool.Identity, error) {
	a, err := t.parse(raw)
	return tool.Identity{Effect: []byte(a.Text)}, err
}

func (t notesTool) Summary(json.RawMessage) string { return notesPost }

func (t notesTool) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	a, err := t.parse(call.Arguments)
	if err != nil {
		return tool.Result{}, err
	}
	body, _ := json.Marshal(map[string]string{"text": a.Text + " " + noteMarker(call.OperationID)})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, t.url+"/notes", strings.NewReader(string(body)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return tool.Result{}, err // a dropped answer: tool.Classify says unknown
	}
	defer resp.Body.Close()
	var out struct{ ID int }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return tool.Result{}, err
	}
	return tool.Result{Output: json.RawMessage(`{}`), ExternalID: fmt.Sprintf("note/%d", out.ID)}, nil
}

// Effect is the tool's lookup: the note that carries the operation's marker.
func (t notesTool) Effect(s tool.Sent) (tool.Effect, error) {
	if _, err := t.parse(s.Arguments); err != nil {
		return nil, err
	}
	return noteEffect{url: t.url, marker: noteMarker(s.OperationID)}, nil
}

type noteEffect struct{ url, marker string }

func (e noteEffect) Key() string { return "a note carrying " + e.marker }

func (e noteEffect) Find(ctx context.Context) (tool.Observation, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.url+"/notes", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return tool.Observation{}, err
	}
	defer resp.Body.Close()
	var notes []string
	if err := json.NewDecoder(resp.Body).Decode(&notes); err != nil {
		return tool.Observation{}, err
	}
	var ids []string
	for i, n := range notes {
		if strings.Contains(n, e.marker) {
			ids = append(ids, fmt.Sprintf("note/%d", i+1))
		}
	}
	switch len(ids) {
	case 0:
		return tool.Observation{Outcome: tool.NotSeen, Detail: "no note carries the marker"}, nil
	case 1:
		return tool.Observation{Outcome: tool.Found, ExternalID: ids[0], Detail: ids[0] + " carries the marker"}, nil
	default:
		return tool.Observation{Outcome: tool.Ambiguous, Detail: strings.Join(ids, ", ") + " carry the marker"}, nil
	}
}

func TestANewToolIsReconciledThroughTheGenericPath(t *testing.T) {
	t.Parallel()
	notes := &notesService{}
	srv := httptest.NewServer(notes)
	t.Cleanup(srv.Close)
	registry := tool.NewRegistry(notesTool{url: srv.URL})
	f := newFixture(t, func(d *activities.Deps) {
		d.Tools = registry
		d.Reconcilers = reconcilers.NewSet(registry) // as the worker builds it
	})
	call := func(n int) contract.ExecuteToolInput {
		return contract.ExecuteToolInput{Tenant: "d", TaskID: "T", TurnID: "T/t1", ToolCallID: fmt.Sprintf("call_%d", n),
			OperationID: fmt.Sprintf("d:T:t1:%s:%d", notesPost, n), Tool: notesPost, Arguments: f.args(t, `{"text":"remember the milk"}`)}
	}
	unknown := func(in contract.ExecuteToolInput) {
		t.Helper()
		_, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
		expectAppError(t, "ExecuteTool with the answer dropped", err, contract.ErrTypeOperationUnknown)
		if op, err := f.ledger.Get(context.Background(), in.OperationID); err != nil || op.State != capstan.OutcomeUnknown || op.Kind != notesPost {
			t.Fatalf("after the dropped answer: %+v, %v; want an UNKNOWN notes_post operation", op, err)
		}
	}
	reconcile := func(in contract.ExecuteToolInput, window time.Duration) contract.ReconcileResult {
		t.Helper()
		v, err := f.env.ExecuteActivity(f.acts.Reconcile, contract.ReconcileInput{Tenant: "d", TaskID: "T",
			OperationID: in.OperationID, ToolCallID: in.ToolCallID, Arguments: in.Arguments, Since: time.Now(), Window: window})
		if err != nil {
			t.Fatal(err)
		}
		var res contract.ReconcileResult
		if err := v.Get(&res); err != nil {
			t.Fatal(err)
		}
		return res
	}

	// The note is kept, its answer lost: the reconciler finds it by the
	// tool's own lookup, and nothing is posted again.
	notes.set(true, false)
	kept := call(1)
	unknown(kept)
	res := reconcile(kept, time.Minute)
	if res.Verdict != capstan.VerdictFound || res.State != capstan.OutcomeSucceeded || res.ExternalID != "note/1" || res.Asked != 1 || res.Item == "" {
		t.Errorf("Reconcile of the kept note: %+v; want found note/1 after one question, with a tool message", res)
	}
	if op, err := f.ledger.Get(context.Background(), kept.OperationID); err != nil || op.State != capstan.OutcomeSucceeded || op.ExternalID != "note/1" {
		t.Errorf("ledger: %+v, %v; want SUCCEEDED note/1", op, err)
	}

	// The request was read but nothing kept: not seen through the window,
	// so absent, and the operation may be executed again.
	notes.set(false, true)
	lost := call(2)
	unknown(lost)
	res = reconcile(lost, time.Millisecond)
	if res.Verdict != capstan.VerdictAbsent || res.State != capstan.OutcomeAbsent || res.Asked < 1 {
		t.Errorf("Reconcile of the lost note: %+v; want absent", res)
	}
	notes.set(false, false)
	if _, err := f.env.ExecuteActivity(f.acts.ExecuteTool, lost); err != nil {
		t.Fatalf("executing the absent operation again: %v", err)
	}
	if notes.count() != 2 {
		t.Errorf("%d notes, want the kept one and the one executed again", notes.count())
	}
}
