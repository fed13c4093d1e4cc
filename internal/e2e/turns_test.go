package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The rest of the turn guard (issue 8) end to end: a cut answer continued,
// an overflow compacted, a fallback model taking a turn over. Each runs the
// real worker and starter against the sandbox, with the sandbox model's
// answers shaped by a fault function.

// chatBody is the part of a Chat Completions request these tests read.
type chatBody struct {
	Model    string `json:"model"`
	Messages []struct {
		Role      string          `json:"role"`
		Content   json.RawMessage `json:"content"`
		ToolCalls []struct {
			ID string `json:"id"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []json.RawMessage `json:"tools"`
}

// readChat reads r's body and puts it back for the sandbox's own handler.
func readChat(t *testing.T, r *http.Request) (chatBody, string) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		t.Errorf("read the model request: %v", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	var c chatBody
	if err := json.Unmarshal(body, &c); err != nil {
		t.Errorf("decode the model request: %v", err)
	}
	return c, string(body)
}

func (c chatBody) assistants() int {
	n := 0
	for _, m := range c.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

// streamText answers with text and a finish reason, as a Chat Completions
// stream.
func streamText(w http.ResponseWriter, text, finish string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	chunk := func(delta, finish string) {
		c := map[string]any{"id": "chatcmpl-e2e", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": "e2e",
			"choices": []map[string]any{{"index": 0, "delta": map[string]any{"role": "assistant", "content": delta}}}}
		if finish != "" {
			c["choices"].([]map[string]any)[0]["finish_reason"] = finish
		}
		b, _ := json.Marshal(c)
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
	}
	chunk(text, "")
	chunk("", finish)
	_, _ = io.WriteString(w, "data: [DONE]\n\n")
}

// A final answer cut by the token limit is continued, and the task delivers
// the whole of it.
func TestCutAnswerIsContinued(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	var mu sync.Mutex
	requests := 0
	var continuation chatBody
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		c, _ := readChat(t, r)
		mu.Lock()
		requests++
		n := requests
		if n == 2 {
			continuation = c
		}
		mu.Unlock()
		if n == 1 {
			streamText(w, "The first half, ", "length")
		} else {
			streamText(w, "and the second half.", "stop")
		}
		return true
	})
	env := endpointEnv(t, "e2e-cut-answer", sb)
	startWorker(t, env)
	r := runStarter(t, env, "run", "--prompt", "hello", "--model", "openai:hello", "--id", fmt.Sprintf("e2e-cut-%d", time.Now().UnixNano()), "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if res.FinalText != "The first half, and the second half." {
		t.Errorf("final text = %q, want the cut half and its continuation", res.FinalText)
	}
	if len(res.Turns) != 1 || len(res.Turns[0].Attempts) != 2 || res.Turns[0].Attempts[1].AttemptID != res.TaskID+"/"+chainScope(t, res.WorkflowID)+"/t1/c1/a1" {
		t.Errorf("turns = %+v, want one turn: the cut answer and continuation c1", res.Turns)
	}
	if !strings.Contains(strings.Join(queryJournal(t, res.TaskID), "\n"), "asking the model to continue it (continuation 1/2)") {
		t.Error("the journal does not say the answer was continued")
	}
	mu.Lock()
	defer mu.Unlock()
	if requests != 2 {
		t.Errorf("the model saw %d requests, want 2", requests)
	}
	if m := continuation.Messages; len(m) != 4 || m[2].Role != "assistant" || !strings.Contains(string(m[2].Content), "The first half, ") ||
		m[3].Role != "user" || !strings.Contains(string(m[3].Content), "cut off by the output token limit") {
		t.Errorf("the continuation request = %+v, want the cut answer and a request to go on", m)
	}
	recordHistory(t, "cut-answer-continued", res.WorkflowID)
}

// An overflow compacts the transcript through a summary call, and the turn
// is tried again on the compacted transcript.
func TestOverflowIsCompacted(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	var mu sync.Mutex
	var summaries, retried []string
	overflowed := false
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		c, body := readChat(t, r)
		mu.Lock()
		defer mu.Unlock()
		switch {
		case len(c.Tools) == 0: // the summary call offers no tools
			summaries = append(summaries, body)
			streamText(w, "Earlier, the agent read README.md.", "stop")
			return true
		case c.assistants() == 2 && !overflowed:
			overflowed = true
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}`)
			return true
		case overflowed && len(retried) == 0:
			retried = append(retried, body)
		}
		return false
	})
	env := endpointEnv(t, "e2e-overflow", sb)
	startWorker(t, env)
	r := runStarter(t, env, "run", "--prompt", "read the README", "--repo", "capstan-sandbox/demo", "--model", "openai:turns-3", "--id", fmt.Sprintf("e2e-overflow-%d", time.Now().UnixNano()), "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	journal := strings.Join(queryJournal(t, res.TaskID), "\n")
	for _, want := range []string{"abandoned (overflow)", "compacting the transcript (round 1/3)", "earlier transcript items summarized"} {
		if !strings.Contains(journal, want) {
			t.Errorf("journal has no line with %q:\n%s", want, journal)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(summaries) != 1 || len(retried) != 1 {
		t.Fatalf("%d summary calls, %d retries, want one of each", len(summaries), len(retried))
	}
	if !strings.Contains(retried[0], "2 earlier transcript items were replaced by this summary") || !strings.Contains(retried[0], "Earlier, the agent read README.md.") {
		t.Errorf("the retried turn did not see the summary:\n%s", retried[0])
	}
	recordHistory(t, "overflow-compacted", res.WorkflowID)
}

// A model that stays overloaded through its budget hands the turn to the
// fallback model, which answers.
func TestFallbackModelTakesTheTurnOver(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	var mu sync.Mutex
	asked := map[string]int{}
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		c, _ := readChat(t, r)
		mu.Lock()
		asked[c.Model]++
		mu.Unlock()
		if c.Model != "hello" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("retry-after-ms", "20")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"message":"The server is overloaded.","type":"server_error"}}`)
		return true
	})
	env := endpointEnv(t, "e2e-fallback", sb)
	startWorker(t, env)
	r := runStarter(t, env, "run", "--prompt", "hello", "--model", "openai:hello", "--fallback", "openai:turns-1",
		"--id", fmt.Sprintf("e2e-fallback-%d", time.Now().UnixNano()), "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	mu.Lock()
	defer mu.Unlock()
	if asked["hello"] != 6 || asked["turns-1"] != 1 {
		t.Errorf("requests by model = %v, want 6 to hello (the budget), then 1 to turns-1", asked)
	}
	attempts := res.Turns[0].Attempts
	if last := attempts[len(attempts)-1]; last.Model != "openai:turns-1" || last.Outcome != "completed" {
		t.Errorf("last attempt = %+v, want completed by the fallback", last)
	}
	if !strings.Contains(strings.Join(queryJournal(t, res.TaskID), "\n"), "switching turn 1 from openai:hello to fallback model openai:turns-1") {
		t.Error("the journal does not say the turn switched models")
	}
	recordHistory(t, "fallback", res.WorkflowID)
}
