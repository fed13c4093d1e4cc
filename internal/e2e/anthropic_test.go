package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/workflows"
)

const anthropicKey = "sk-ant-capstan-e2e-anthropic-5b1d"

// anthropicScript is an Anthropic Messages server playing one task: the
// first request is cut by an overloaded_error event after some text (under
// HTTP 200, as Anthropic sends it), the second asks for a branch with a
// tool_use block, and the third, which must carry the tool's result, ends
// the task in words.
type anthropicScript struct {
	branch string

	mu       sync.Mutex
	auth     []string
	requests []map[string]any
}

func (s *anthropicScript) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
		http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	s.requests = append(s.requests, body)
	n := len(s.requests)
	s.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	send := func(event string, data map[string]any) {
		b, _ := json.Marshal(data)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, b)
		w.(http.Flusher).Flush()
	}
	send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": fmt.Sprintf("msg_%d", n), "type": "message", "role": "assistant", "content": []any{},
		"model": body["model"], "stop_reason": nil, "usage": map[string]any{"input_tokens": 40, "output_tokens": 1}}})
	text := func(index int, s string) {
		send("content_block_start", map[string]any{"type": "content_block_start", "index": index,
			"content_block": map[string]any{"type": "text", "text": ""}})
		send("content_block_delta", map[string]any{"type": "content_block_delta", "index": index,
			"delta": map[string]any{"type": "text_delta", "text": s}})
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": index})
	}
	end := func(stop string) {
		send("message_delta", map[string]any{"type": "message_delta",
			"delta": map[string]any{"stop_reason": stop, "stop_sequence": nil}, "usage": map[string]any{"output_tokens": 12}})
		send("message_stop", map[string]any{"type": "message_stop"})
	}
	switch n {
	case 1:
		text(0, "Abandoned words")
		send("error", map[string]any{"type": "error", "error": map[string]any{"type": "overloaded_error", "message": "Overloaded"}})
	case 2:
		text(0, "I'll make a branch.")
		send("content_block_start", map[string]any{"type": "content_block_start", "index": 1,
			"content_block": map[string]any{"type": "tool_use", "id": "toolu_e2e_1", "name": "github_create_branch", "input": map[string]any{}}})
		args := fmt.Sprintf(`{"repo":"capstan-sandbox/demo","branch":%q,"from":"main"}`, s.branch)
		for _, part := range []string{args[:10], args[10:30], args[30:]} {
			send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 1,
				"delta": map[string]any{"type": "input_json_delta", "partial_json": part}})
		}
		send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 1})
		end("tool_use")
	default:
		text(0, "Done: the branch "+s.branch+" exists.")
		end("end_turn")
	}
}

// TestAnthropicTask runs a task with --model anthropic:<name> on a worker
// that has only an Anthropic key: a mid-stream overload is retried, a
// tool_use block runs its tool once, and the tool's result goes back as a
// tool_result block; the key reaches the server and never the history.
func TestAnthropicTask(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	taskID := fmt.Sprintf("e2e-anthropic-%d", time.Now().UnixNano())
	script := &anthropicScript{branch: "capstan/anthropic-" + taskID}
	api := httptest.NewServer(script)
	t.Cleanup(api.Close)

	env := append(baseEnv(t, "e2e-anthropic"),
		"ANTHROPIC_BASE_URL="+api.URL, "ANTHROPIC_API_KEY="+anthropicKey,
		"GITHUB_API_URL="+sb.GitHubURL, "GITHUB_TOKEN="+githubTok,
	)
	startWorker(t, env)
	r := runStarter(t, env, "run", "--prompt", "Make a branch for the greeting.",
		"--repo", "capstan-sandbox/demo", "--base", "main",
		"--model", "anthropic:claude-e2e", "--id", taskID, "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("starter run exited %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if res.Status != workflows.StatusCompleted || res.FinalText != "Done: the branch "+script.branch+" exists." {
		t.Fatalf("result = %+v, want completed with the script's last words", res)
	}
	if len(res.Turns) != 2 {
		t.Fatalf("turns = %+v, want 2 (the branch, the answer)", res.Turns)
	}
	first := res.Turns[0].Attempts
	if len(first) != 2 || first[0].Outcome != "overloaded" || first[0].Phase != "STREAM_PARTIAL" || first[0].HTTPStatus != 200 ||
		first[1].Outcome != "completed" {
		t.Errorf("first turn attempts = %+v, want overloaded at STREAM_PARTIAL under HTTP 200, then completed", first)
	}
	if len(res.Operations) != 1 || res.Operations[0].Tool != "github_create_branch" || res.Operations[0].State != capstan.OutcomeSucceeded ||
		res.Operations[0].ToolCallID != "toolu_e2e_1" {
		t.Errorf("operations = %+v, want one SUCCEEDED github_create_branch for toolu_e2e_1", res.Operations)
	}
	if gh := sb.GitHub.Stats(); gh.BranchesCreated != 1 {
		t.Errorf("github stats = %+v, want exactly 1 branch", gh)
	}

	script.mu.Lock()
	auth, requests := script.auth, script.requests
	script.mu.Unlock()
	if len(requests) != 3 {
		t.Fatalf("the Anthropic server saw %d requests, want 3", len(requests))
	}
	for i, a := range auth {
		if a != "Bearer "+anthropicKey {
			t.Errorf("request %d Authorization = %q, want the worker's key", i+1, a)
		}
	}
	// The third request carries the committed turn in Anthropic's shapes:
	// the assistant's tool_use block, then the result in a tool_result block.
	last, _ := json.Marshal(requests[2]["messages"])
	for _, want := range []string{
		`"type":"tool_use"`, `"id":"toolu_e2e_1"`, `"name":"github_create_branch"`,
		`"type":"tool_result"`, `"tool_use_id":"toolu_e2e_1"`,
	} {
		if !strings.Contains(string(last), want) {
			t.Errorf("third request's messages lack %s:\n%s", want, last)
		}
	}
	if strings.Contains(string(last), "Abandoned words") {
		t.Errorf("the abandoned attempt's text reached the transcript:\n%s", last)
	}
	if _, ok := requests[2]["system"]; !ok {
		t.Errorf("third request has no separate system prompt: %v", requests[2])
	}

	hist := history(t, res.WorkflowID)
	if strings.Contains(hist, anthropicKey) {
		t.Error("workflow history contains the Anthropic key")
	}
	if !strings.Contains(hist, "anthropic:claude-e2e") {
		t.Fatal("history check is blind: the history does not even contain the model")
	}
}

// TestAnthropicTaskOnWorkerWithoutKey: a worker with only an OpenAI key
// starts (warning that anthropic: tasks fail on it), and a task naming
// anthropic fails at once with worker_misconfigured, naming the variable to
// set; nothing is sent anywhere.
func TestAnthropicTaskOnWorkerWithoutKey(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	env := endpointEnv(t, "e2e-anthropic-nokey", sb)
	w := startWorker(t, env)
	taskID := fmt.Sprintf("e2e-anthropic-nokey-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run", "--prompt", "Say hello.", "--model", "anthropic:claude-e2e",
		"--id", taskID, "--wait", "--json")
	res := decodeResult(t, r)
	if res.Status != workflows.StatusFailed || res.FailureCode != workflows.FailWorkerMisconfigured ||
		!strings.Contains(res.Message, "ANTHROPIC_API_KEY") {
		t.Fatalf("result = %+v (exit %d), want failed worker_misconfigured naming ANTHROPIC_API_KEY", res, r.code)
	}
	if n := sb.Model.Stats().Requests; n != 0 {
		t.Errorf("the model server saw %d requests, want none", n)
	}
	if !strings.Contains(w.logs(), "ANTHROPIC_API_KEY is not set") {
		t.Errorf("the worker did not warn at startup that it serves no anthropic: tasks:\n%s", w.logs())
	}
}
