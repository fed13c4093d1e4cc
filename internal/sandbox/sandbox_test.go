package sandbox

import (
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/slack-go/slack"
)

// startSandbox runs all three fakes for one test.
func startSandbox(t *testing.T, opts Options) *Sandbox {
	t.Helper()
	sb, err := Start(opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := sb.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return sb
}

func TestStartServesAllFakes(t *testing.T) {
	sb := startSandbox(t, Options{})

	for _, c := range []struct{ url, suffix string }{
		{sb.ModelURL, "/v1"}, {sb.GitHubURL, "/"}, {sb.SlackURL, "/api/"},
	} {
		if !strings.HasPrefix(c.url, "http://127.0.0.1:") || !strings.HasSuffix(c.url, c.suffix) {
			t.Errorf("URL %q: want http://127.0.0.1:<port>%s", c.url, c.suffix)
		}
	}

	res, err := complete(t, newOpenAIClient(sb.ModelURL), openai.ChatCompletionNewParams{
		Model: "hello", Messages: conversation(0),
	})
	if err != nil {
		t.Fatalf("model: %v", err)
	}
	if res.acc.Choices[0].Message.Content == "" {
		t.Error("model: empty answer")
	}

	client := slack.New("xoxb-sandbox", slack.OptionAPIURL(sb.SlackURL))
	if _, _, err := client.PostMessage("#capstan", slack.MsgOptionText("hi", false)); err != nil {
		t.Fatalf("slack: %v", err)
	}

	resp, err := http.Get(sb.GitHubURL)
	if err != nil {
		t.Fatalf("github: %v", err)
	}
	resp.Body.Close()

	var ms ModelStats
	getJSON(t, strings.TrimSuffix(sb.ModelURL, "/v1")+sandboxStatsPath, &ms)
	if ms.StreamsCompleted != 1 || ms.ScriptRequests["hello"] != 1 {
		t.Errorf("model stats = %+v", ms)
	}
	var ss SlackStats
	getJSON(t, strings.TrimSuffix(sb.SlackURL, "/api/")+sandboxStatsPath, &ss)
	if ss.MessagesPosted != 1 || sb.Slack.Stats() != ss {
		t.Errorf("slack stats = %+v, direct %+v", ss, sb.Slack.Stats())
	}
}

func TestStartListenFailureNamesFakeAndAddress(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { busy.Close() })
	addr := busy.Addr().String()

	sb, err := Start(Options{SlackAddr: addr})
	if err == nil {
		sb.Close()
		t.Fatal("Start on a busy address succeeded")
	}
	if msg := err.Error(); !strings.Contains(msg, "slack") || !strings.Contains(msg, addr) {
		t.Errorf("error %q does not name the slack fake and %s", msg, addr)
	}
}

func TestCloseStopsServersAndIsIdempotent(t *testing.T) {
	sb, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := sb.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if resp, err := http.Get(strings.TrimSuffix(sb.ModelURL, "/v1") + sandboxStatsPath); err == nil {
		resp.Body.Close()
		t.Error("model fake still answers after Close")
	}
}
