package e2e

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
)

// streamToolCall answers with one tool call, as a Chat Completions stream.
func streamToolCall(w http.ResponseWriter, id, name, args string) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	chunk := func(delta map[string]any, finish string) {
		choice := map[string]any{"index": 0, "delta": delta}
		if finish != "" {
			choice["finish_reason"] = finish
		}
		b, _ := json.Marshal(map[string]any{"id": "chatcmpl-e2e", "object": "chat.completion.chunk", "created": time.Now().Unix(),
			"model": "e2e", "choices": []map[string]any{choice}})
		_, _ = fmt.Fprintf(w, "data: %s\n\n", b)
	}
	chunk(map[string]any{"role": "assistant", "tool_calls": []map[string]any{{
		"index": 0, "id": id, "type": "function", "function": map[string]any{"name": name, "arguments": args},
	}}}, "")
	chunk(map[string]any{}, "tool_calls")
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
}

// putRepoFile writes a file on main of a sandbox repository, as its owner
// would, through the fake's REST API.
func putRepoFile(t *testing.T, sb *sandbox.Sandbox, repo, path, content string) {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"message": "add " + path, "content": base64.StdEncoding.EncodeToString([]byte(content))})
	url := strings.TrimRight(sb.GitHubURL, "/") + "/repos/" + repo + "/contents/" + path
	req, err := http.NewRequest(http.MethodPut, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+githubTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("PUT %s: %s", url, resp.Status)
	}
}

// TestToolPreviewsKeepRepositoryContentOutOfHistory: a task reads a file
// of its repository whose first line is a distinctive string. The model
// gets the content (through the ledger), but the workflow's history —
// stored unencrypted on the Temporal server — never holds it: the read's
// preview says how much was read of what, not what.
func TestToolPreviewsKeepRepositoryContentOutOfHistory(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	const canary = "capstan-canary-5d1e8b"
	putRepoFile(t, sb, "capstan-sandbox/notes", "NOTES.md", canary+": this line is repository content.\n")
	var calls, sawContent atomic.Int32
	sb.Model.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		_, body := readChat(t, r)
		if calls.Add(1) == 1 {
			streamToolCall(w, "call_read_1", "github_get_file", `{"repo":"capstan-sandbox/notes","path":"NOTES.md"}`)
			return true
		}
		if strings.Contains(body, canary) {
			sawContent.Add(1)
		}
		streamText(w, "I read NOTES.md; it has one line.", "stop")
		return true
	})
	env := endpointEnv(t, "e2e-preview", sb)
	startWorker(t, env)

	taskID := fmt.Sprintf("e2e-preview-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run", "--prompt", "Read NOTES.md", "--repo", "capstan-sandbox/notes",
		"--model", "openai:hello", "--id", taskID, "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("starter run: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	if len(res.Operations) != 1 || res.Operations[0].Tool != "github_get_file" || res.Operations[0].State != capstan.OutcomeSucceeded {
		t.Fatalf("operations = %+v, want the one read, succeeded", res.Operations)
	}
	if sawContent.Load() != 1 {
		t.Fatal("the model never received the file's content: the test reads nothing")
	}
	hist := history(t, res.WorkflowID)
	if !strings.Contains(hist, "NOTES.md") || !strings.Contains(hist, "github_get_file") {
		t.Fatal("history check is blind: the history does not even name the read")
	}
	if i := strings.Index(hist, canary); i >= 0 {
		t.Errorf("the workflow history holds the file's content: %q", hist[max(i-120, 0):min(i+60, len(hist))])
	}
}
