package sandbox

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/openai/openai-go/v3"
	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan/internal/testenv"
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
	testenv.GetJSON(t, strings.TrimSuffix(sb.ModelURL, "/v1")+"/_sandbox/stats", &ms)
	if ms.StreamsCompleted != 1 || ms.ScriptRequests["hello"] != 1 {
		t.Errorf("model stats = %+v", ms)
	}
	var ss SlackStats
	testenv.GetJSON(t, strings.TrimSuffix(sb.SlackURL, "/api/")+"/_sandbox/stats", &ss)
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
	if resp, err := http.Get(strings.TrimSuffix(sb.ModelURL, "/v1") + "/_sandbox/stats"); err == nil {
		resp.Body.Close()
		t.Error("model fake still answers after Close")
	}
}

// controlRequest sends a request to a /_sandbox/ endpoint and decodes the
// JSON answer, if any, into out.
func controlRequest(t *testing.T, method, url, body string, out any) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("%s %s: %s, %v", method, url, resp.Status, err)
		}
	}
	return resp.StatusCode
}

// TestFaultControlEndpoint sets faults the way a test drives a running
// sandbox program: over HTTP.
func TestFaultControlEndpoint(t *testing.T) {
	sb := startSandbox(t, Options{})
	type state struct {
		Endpoint   string `json:"endpoint"`
		Kind       string `json:"kind"`
		Times      int    `json:"times"`
		Status     int    `json:"status"`
		Delay      string `json:"delay"`
		Lag        string `json:"lag"`
		RetryAfter string `json:"retry_after"`
		Fired      int    `json:"fired"`
	}
	ghFaults := strings.TrimSuffix(sb.GitHubURL, "/") + "/_sandbox/faults"
	slackFaults := strings.TrimSuffix(sb.SlackURL, "/api/") + "/_sandbox/faults"

	var added state
	if code := controlRequest(t, http.MethodPost, ghFaults, `{"endpoint":"repos/get","kind":"rate_limit","times":1}`, &added); code != http.StatusCreated ||
		added != (state{Endpoint: "repos/get", Kind: "rate_limit", Times: 1, Status: 429, RetryAfter: "1m0s"}) {
		t.Fatalf("POST: %d %+v, want 201 with the defaults filled in", code, added)
	}
	added = state{}
	if code := controlRequest(t, http.MethodPost, slackFaults, `{"endpoint":"conversations.history","kind":"lag","lag":"1.5s"}`, &added); code != http.StatusCreated ||
		added != (state{Endpoint: "conversations.history", Kind: "lag", Lag: "1.5s"}) {
		t.Fatalf("POST slack: %d %+v", code, added)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"endpoint":"repos/get","kind":"delay"}`, "delay is required"},
		{`{"endpoint":"repos/get","kind":"delay","delay":"soon"}`, "invalid duration"},
		{`{"endpoint":"repos/get","kind":"fail","colour":"red"}`, "unknown field"},
		{`{"endpoint":"chat.postMessage","kind":"fail"}`, "unknown endpoint"},
	} {
		var e struct{ Error string }
		if code := controlRequest(t, http.MethodPost, ghFaults, bad.body, &e); code != http.StatusBadRequest || !strings.Contains(e.Error, bad.want) {
			t.Errorf("POST %s: %d %q, want 400 about %q", bad.body, code, e.Error, bad.want)
		}
	}

	resp, err := http.Get(sb.GitHubURL + "repos/acme/app")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("faulted request: %s, remaining %q", resp.Status, resp.Header.Get("X-RateLimit-Remaining"))
	}
	var listed []state
	testenv.GetJSON(t, ghFaults, &listed)
	if len(listed) != 1 || listed[0].Fired != 1 {
		t.Errorf("GET after one request: %+v, want the rule fired once", listed)
	}
	if code := controlRequest(t, http.MethodDelete, ghFaults, "", nil); code != http.StatusNoContent {
		t.Errorf("DELETE: %d", code)
	}
	listed = nil
	testenv.GetJSON(t, ghFaults, &listed)
	if len(listed) != 0 {
		t.Errorf("GET after DELETE: %+v", listed)
	}
	testenv.GetJSON(t, slackFaults, &listed)
	if len(sb.GitHub.Faults()) != 0 || len(listed) != 1 {
		t.Errorf("after DELETE on GitHub: github %+v, slack %+v; want only Slack's rule", sb.GitHub.Faults(), listed)
	}
	if code := controlRequest(t, http.MethodPut, ghFaults, "", nil); code != http.StatusMethodNotAllowed {
		t.Errorf("PUT: %d, want 405", code)
	}
	// The model takes rules on its host, without /v1; model_faults_test.go
	// covers what they do.
	modelFaults := strings.TrimSuffix(sb.ModelURL, "/v1") + "/_sandbox/faults"
	var modelRule map[string]any
	if code := controlRequest(t, http.MethodPost, modelFaults,
		`{"endpoint":"messages","kind":"stall","after_events":3,"times":2}`, &modelRule); code != http.StatusCreated ||
		modelRule["kind"] != "stall" || modelRule["after_events"] != 3.0 || modelRule["times"] != 2.0 {
		t.Errorf("model POST: %d %v", code, modelRule)
	}
	if fs := sb.Model.Faults(); len(fs) != 1 || fs[0].AfterEvents != 3 || fs[0].Endpoint != "messages" {
		t.Errorf("model rules = %+v", fs)
	}
}

// TestControlPathsInsideTheGitHubAPI: a repository file named like a
// control endpoint is a file, not the endpoint.
func TestControlPathsInsideTheGitHubAPI(t *testing.T) {
	sb := startSandbox(t, Options{})
	resp, err := http.Get(sb.GitHubURL + "repos/acme/app/contents/_sandbox/stats")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || sb.GitHub.Stats().Requests != 1 {
		t.Errorf("GET contents/_sandbox/stats: %s, stats %+v; want the API's 404, counted", resp.Status, sb.GitHub.Stats())
	}
	var st GitHubStats
	testenv.GetJSON(t, sb.GitHubURL+"api/v3/_sandbox/stats", &st)
	if st.Requests != 1 {
		t.Errorf("stats under a mount prefix = %+v", st)
	}
}
