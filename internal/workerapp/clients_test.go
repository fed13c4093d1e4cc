package workerapp

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/model"
)

// anthropicAnswer is one whole Messages stream, as Anthropic sends it.
const anthropicAnswer = "event: message_start\n" +
	`data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"usage":{"input_tokens":3,"output_tokens":1}}}` + "\n\n" +
	"event: content_block_start\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}` + "\n\n" +
	"event: content_block_delta\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hello"}}` + "\n\n" +
	"event: content_block_stop\n" + `data: {"type":"content_block_stop","index":0}` + "\n\n" +
	"event: message_delta\n" + `data: {"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":2}}` + "\n\n" +
	"event: message_stop\n" + `data: {"type":"message_stop"}` + "\n\n"

// seenRequest is what the fake Anthropic server was sent.
type seenRequest struct{ path, auth string }

func fakeAnthropic(t *testing.T) (*httptest.Server, <-chan seenRequest) {
	t.Helper()
	seen := make(chan seenRequest, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		seen <- seenRequest{r.URL.Path, r.Header.Get("Authorization")}
		if r.URL.Path != "/v1/messages" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, anthropicAnswer)
	}))
	t.Cleanup(srv.Close)
	return srv, seen
}

// streamText runs one attempt through p and returns its text.
func streamText(t *testing.T, p model.Provider) string {
	t.Helper()
	s, err := p.Stream(context.Background(), model.Request{Model: "claude-test",
		Messages: []model.Message{{Role: model.RoleUser, Content: "hi"}}})
	if err != nil {
		t.Fatalf("Stream: %v", err)
	}
	defer s.Close()
	var text strings.Builder
	for {
		ev, err := s.Recv()
		if errors.Is(err, io.EOF) {
			return text.String()
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		text.WriteString(ev.Text)
	}
}

func TestAnthropicOnlyWorker(t *testing.T) {
	t.Parallel()
	srv, seen := fakeAnthropic(t)
	cfg := config.FromEnv(func(k string) string {
		return map[string]string{"ANTHROPIC_API_KEY": "sk-ant-worker-test", "ANTHROPIC_BASE_URL": srv.URL,
			"GITHUB_TOKEN": "g"}[k]
	})
	if err := cfg.ValidateWorker(); err != nil {
		t.Fatalf("ValidateWorker: %v", err)
	}
	var logs bytes.Buffer
	providers := modelProviders(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if got := sortedKeys(providers); len(got) != 1 || got[0] != "anthropic" || providers["anthropic"].Name() != "anthropic" {
		t.Fatalf("providers = %v, want anthropic alone", got)
	}
	if !strings.Contains(logs.String(), "OPENAI_API_KEY is not set") {
		t.Errorf("no warning about the provider left out; logs:\n%s", logs.String())
	}
	if text := streamText(t, providers["anthropic"]); text != "hello" {
		t.Fatalf("text = %q", text)
	}
	if r := <-seen; r != (seenRequest{"/v1/messages", "Bearer sk-ant-worker-test"}) {
		t.Fatalf("the server saw %+v", r)
	}
}

// TestClientsWithoutSlackToken: no SLACK_BOT_TOKEN leaves Slack nil (the
// activities then fail a Slack delivery as worker_misconfigured, and the
// reconcilers cannot ask Slack) and says so at start.
func TestClientsWithoutSlackToken(t *testing.T) {
	t.Parallel()
	cfg := config.FromEnv(func(k string) string {
		return map[string]string{"OPENAI_API_KEY": "sk-test", "GITHUB_TOKEN": "g", "GITHUB_API_URL": "http://127.0.0.1:1/"}[k]
	})
	var logs bytes.Buffer
	cl, err := NewClients(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if cl.Slack != nil {
		t.Error("a Slack client was built without a token")
	}
	if !strings.Contains(logs.String(), "SLACK_BOT_TOKEN is not set") {
		t.Errorf("no warning about Slack; logs:\n%s", logs.String())
	}
	if got := sortedKeys(cl.Providers); len(got) != 1 || got[0] != "openai" {
		t.Errorf("providers = %v, want openai alone", got)
	}
	if len(cl.Tools.Specs()) == 0 {
		t.Error("the tool registry is empty")
	}
}
