package e2e

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/tool"
)

// TestSlackReconcilerWithinSlackLimits: Slack takes the final answer but its
// answer is lost, so the Slack reconciler looks — against a Slack as strict
// as the real one with apps outside its Marketplace: conversations.history
// takes a channel id (channel_not_found for "#name"), answers one request in
// 3 s here (a minute in Slack) with 429 and Retry-After for the rest, and 15
// messages a page. The channel had a busy minute just before, so the answer
// is on the second page. The reconciler resolves the name, reads only from
// the send on (less the stated clock margin), waits out the 429 saying so,
// and finds the message: one message, the delivery recovered.
func TestSlackReconcilerWithinSlackLimits(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	other := slack.New(sandbox.SandboxUserToken("alice"), slack.OptionAPIURL(sb.SlackURL))
	post := func(text string) {
		t.Helper()
		if _, _, err := other.PostMessage("#capstan-e2e", slack.MsgOptionText(text, false)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 20 {
		post(fmt.Sprintf("recent %d", i))
	}
	sb.Slack.LimitHistory(sandbox.HistoryLimit{Every: 3 * time.Second, PageMax: 15})

	// Every conversations.history request, as Slack would see it.
	var mu sync.Mutex
	var reads []string
	sb.Slack.SetFault(func(_ http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if strings.HasSuffix(r.URL.Path, "/conversations.history") && r.ParseForm() == nil {
			mu.Lock()
			reads = append(reads, r.Form.Get("channel")+" oldest="+r.Form.Get("oldest"))
			mu.Unlock()
		}
		return false
	})
	if err := sb.Slack.AddFault(sandbox.FaultRule{Endpoint: "chat.postMessage", Kind: sandbox.FaultDrop, Times: 1}); err != nil {
		t.Fatal(err)
	}

	env := append(endpointEnv(t, "e2e-slack-limits", sb), "CAPSTAN_RECONCILE_WINDOW=2s", "CAPSTAN_HEARTBEAT_TIMEOUT=3s")
	w := startWorker(t, env)
	started := time.Now()
	id := fmt.Sprintf("e2e-slack-limits-%d", started.UnixNano())
	r := runStarter(t, env, "run", "--prompt", "open a pull request and report", "--repo", "capstan-sandbox/demo",
		"--model", "openai:demo", "--slack", "#capstan-e2e", "--id", id, "--human-timeout", "1m", "--wait", "--json")
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	res := decodeResult(t, r)
	channelID := sb.Slack.ChannelID("#capstan-e2e")
	var ours []sandbox.SlackMessage
	for _, m := range sb.Slack.Messages(channelID) {
		if m.Metadata.EventType != "" {
			ours = append(ours, m)
		}
	}
	if len(ours) != 1 {
		t.Fatalf("capstan's messages = %+v, want exactly one", ours)
	}
	if len(res.Deliveries) != 1 {
		t.Fatalf("deliveries = %+v, want the Slack one", res.Deliveries)
	}
	if d := res.Deliveries[0]; d.State != capstan.OutcomeSucceeded || !d.Recovered || d.ExternalID != channelID+"/"+ours[0].TS {
		t.Errorf("delivery = %+v, want recovered at %s/%s", d, channelID, ours[0].TS)
	}

	mu.Lock()
	defer mu.Unlock()
	if len(reads) < 2 {
		t.Fatalf("conversations.history requests = %q, want at least two pages", reads)
	}
	for _, read := range reads {
		channel, oldest, _ := strings.Cut(read, " oldest=")
		sec, _, _ := strings.Cut(oldest, ".")
		at, err := strconv.ParseInt(sec, 10, 64)
		if from := started.Add(-tool.ClockMargin).Unix() - 1; channel != channelID || err != nil || at < from {
			t.Errorf("conversations.history request %q: want channel %s and oldest from the send less the clock margin (%d) on", read, channelID, from)
		}
	}
	if logs := w.logs(); !strings.Contains(logs, "reconciler waiting") || !strings.Contains(logs, "Retry-After") {
		t.Errorf("the worker never said it was waiting on Slack's rate limit:\n%s", logs)
	}
}
