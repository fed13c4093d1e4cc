package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/slack-go/slack"
)

// The Slack fake's fault rules, through slack-go as capstan's delivery and
// reconciler use it.

func mustAddFault(t *testing.T, f interface{ AddFault(FaultRule) error }, rule FaultRule) {
	t.Helper()
	if err := f.AddFault(rule); err != nil {
		t.Fatal(err)
	}
}

// slackCalls are the two methods capstan uses, each made once.
var slackCalls = []struct {
	method string
	run    func(ctx context.Context, c *slack.Client) error
}{
	{"chat.postMessage", func(ctx context.Context, c *slack.Client) error {
		_, _, err := c.PostMessageContext(ctx, "#capstan", slack.MsgOptionText("done", false),
			slack.MsgOptionMetadata(slack.SlackMetadata{EventType: "capstan_delivery", EventPayload: map[string]any{"operation_id": "op-1"}}))
		return err
	}},
	{"conversations.history", func(ctx context.Context, c *slack.Client) error {
		_, err := c.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{ChannelID: SlackGeneralID, IncludeAllMetadata: true})
		return err
	}},
}

func TestSlackRefusalFaultsChangeNothing(t *testing.T) {
	for _, call := range slackCalls {
		t.Run("fail/"+call.method, func(t *testing.T) {
			fake, apiURL := newSlackServer(t)
			c := slack.New("xoxb-sandbox", slack.OptionAPIURL(apiURL))
			mustAddFault(t, fake, FaultRule{Endpoint: call.method, Kind: FaultFail, Times: 1, Status: http.StatusServiceUnavailable})
			var sce slack.StatusCodeError
			if err := call.run(context.Background(), c); !errors.As(err, &sce) || sce.Code != http.StatusServiceUnavailable {
				t.Fatalf("err = %v, want a 503 StatusCodeError", err)
			}
			if st := fake.Stats(); st != (SlackStats{}) {
				t.Errorf("stats moved under a refusal: %+v", st)
			}
			if err := call.run(context.Background(), c); err != nil {
				t.Fatalf("second call: %v", err)
			}
			if fs := fake.Faults(); fs[0].Fired != 1 {
				t.Errorf("faults = %+v", fs)
			}
		})
		t.Run("rate_limit/"+call.method, func(t *testing.T) {
			fake, apiURL := newSlackServer(t)
			c := slack.New("xoxb-sandbox", slack.OptionAPIURL(apiURL))
			mustAddFault(t, fake, FaultRule{Endpoint: call.method, Kind: FaultRateLimit, Times: 1, RetryAfter: 7 * time.Second})
			var rl *slack.RateLimitedError
			if err := call.run(context.Background(), c); !errors.As(err, &rl) || rl.RetryAfter != 7*time.Second {
				t.Fatalf("err = %#v, want a RateLimitedError retrying after 7s", err)
			}
			if st := fake.Stats(); st != (SlackStats{}) || len(fake.Messages("#capstan")) != 0 {
				t.Errorf("stats moved under a rate limit: %+v", st)
			}
			if err := call.run(context.Background(), c); err != nil {
				t.Fatalf("second call: %v", err)
			}
		})
	}
}

// TestSlackRateLimitBody: the answer is Slack's own, status, header and body.
func TestSlackRateLimitBody(t *testing.T) {
	fake, apiURL := newSlackServer(t)
	mustAddFault(t, fake, FaultRule{Endpoint: "chat.postMessage", Kind: FaultRateLimit})
	resp, err := http.PostForm(apiURL+"chat.postMessage", url.Values{"token": {"t"}, "channel": {"C1"}, "text": {"x"}})
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		OK    bool   `json:"ok"`
		Error string `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusTooManyRequests ||
		resp.Header.Get("Retry-After") != "60" || body.OK || body.Error != "ratelimited" {
		t.Errorf("got %d Retry-After %q %+v %v; want 429, 60, ok=false error=ratelimited",
			resp.StatusCode, resp.Header.Get("Retry-After"), body, err)
	}
}

func TestSlackDropPostsOnce(t *testing.T) {
	fake, apiURL := newSlackServer(t)
	c := slack.New("xoxb-sandbox", slack.OptionAPIURL(apiURL))
	mustAddFault(t, fake, FaultRule{Endpoint: "chat.postMessage", Kind: FaultDrop, Times: 1})
	var sce slack.StatusCodeError
	err := slackCalls[0].run(context.Background(), c)
	var ue *url.Error
	if !errors.As(err, &ue) || errors.As(err, &sce) {
		t.Fatalf("err = %v, want a transport error and no response", err)
	}
	// The message is there, with the metadata a reconciler looks for.
	hist, err := c.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: fake.ChannelID("#capstan"), IncludeAllMetadata: true})
	if err != nil || len(hist.Messages) != 1 || hist.Messages[0].Metadata.EventPayload["operation_id"] != "op-1" {
		t.Fatalf("history after a dropped post = %+v, %v", hist, err)
	}
	if st := fake.Stats(); st.MessagesPosted != 1 || st.Requests != 2 {
		t.Errorf("stats = %+v, want 1 posted in 2 requests", st)
	}
}

func TestSlackDelayOutlastsTheClient(t *testing.T) {
	fake, apiURL := newSlackServer(t)
	c := slack.New("xoxb-sandbox", slack.OptionAPIURL(apiURL))
	mustAddFault(t, fake, FaultRule{Endpoint: "chat.postMessage", Kind: FaultDelay, Times: 1, Delay: time.Hour})
	done := make(chan struct{})
	fake.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		defer close(done)
		next.ServeHTTP(w, r)
		return true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := slackCalls[0].run(ctx, c); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("err = %v, want the client's deadline", err)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the held answer outlived the client by 10s")
	}
	if st := fake.Stats(); st.MessagesPosted != 1 || len(fake.Messages("#capstan")) != 1 {
		t.Errorf("stats = %+v, want the post made once", st)
	}
}

func TestSlackLaggingHistory(t *testing.T) {
	fake, apiURL := newSlackServer(t)
	clock := NewManualClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	fake.SetNow(clock.Now)
	c := slack.New("xoxb-sandbox", slack.OptionAPIURL(apiURL))
	_, early, err := c.PostMessage("#capstan", slack.MsgOptionText("early", false))
	if err != nil {
		t.Fatal(err)
	}
	clock.Advance(3 * time.Second)
	if err := slackCalls[0].run(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	mustAddFault(t, fake, FaultRule{Endpoint: "conversations.history", Kind: FaultLag, Lag: 2 * time.Second})
	history := func() []string {
		t.Helper()
		h, err := c.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: fake.ChannelID("#capstan"), IncludeAllMetadata: true, Inclusive: true})
		if err != nil {
			t.Fatal(err)
		}
		var ts []string
		for _, m := range h.Messages {
			ts = append(ts, m.Timestamp)
		}
		return ts
	}
	if got := history(); len(got) != 1 || got[0] != early {
		t.Errorf("history = %v, want only the message 3s old (%s)", got, early)
	}
	clock.Advance(2*time.Second - time.Microsecond)
	if got := history(); len(got) != 1 {
		t.Errorf("history a microsecond before the lag = %v, want one message", got)
	}
	clock.Advance(time.Microsecond)
	if got := history(); len(got) != 2 {
		t.Errorf("history after the lag = %v, want both", got)
	}
	if fs := fake.Faults(); fs[0].Fired != 3 {
		t.Errorf("faults = %+v", fs)
	}
}

// TestSandboxCloseReleasesHeldAnswers: Close does not wait out a delay, and
// the held request's handler returns with it.
func TestSandboxCloseReleasesHeldAnswers(t *testing.T) {
	sb, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	mustAddFault(t, sb.Slack, FaultRule{Endpoint: "chat.postMessage", Kind: FaultDelay, Delay: time.Hour})
	holding, handled := make(chan struct{}), make(chan struct{})
	sb.Slack.SetOnHold(func() { close(holding) })
	sb.Slack.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		defer close(handled)
		next.ServeHTTP(w, r)
		return true
	})
	posted := make(chan error, 1)
	go func() {
		posted <- slackCalls[0].run(context.Background(), slack.New("xoxb-sandbox", slack.OptionAPIURL(sb.SlackURL)))
	}()
	<-holding
	closed := make(chan error, 1)
	go func() { closed <- sb.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close waited out the delay")
	}
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the held request's handler still runs 10s after Close")
	}
	if err := <-posted; err == nil {
		t.Error("the client got an answer; want the connection closed")
	}
	if n := sb.Slack.Stats().MessagesPosted; n != 1 {
		t.Errorf("MessagesPosted = %d, want 1", n)
	}
}
