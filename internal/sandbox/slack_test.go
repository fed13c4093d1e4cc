package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan/internal/testenv"
)

// newSlackServer runs a fresh Slack fake for one test and returns its API
// base URL as slack-go wants it.
func newSlackServer(t *testing.T) (*Slack, string) {
	t.Helper()
	s := NewSlack()
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv.URL + "/api/"
}

func TestSlackPostAndHistoryWithMetadata(t *testing.T) {
	fake, apiURL := newSlackServer(t)
	client := slack.New("xoxb-sandbox", slack.OptionAPIURL(apiURL))

	auth, err := client.AuthTest()
	if err != nil {
		t.Fatalf("auth.test: %v", err)
	}
	if auth.Team == "" || auth.UserID == "" {
		t.Errorf("auth.test = %+v, want team and user", auth)
	}

	const opID = "acme:task-1:deliver:slack"
	channel, ts1, err := client.PostMessage("#capstan",
		slack.MsgOptionText("first, no metadata", false))
	if err != nil {
		t.Fatalf("post 1: %v", err)
	}
	if channel != fake.ChannelID("#capstan") || !strings.HasPrefix(channel, "C") {
		t.Errorf("channel = %q, want the id of #capstan, %q", channel, fake.ChannelID("#capstan"))
	}
	_, ts2, err := client.PostMessage("#capstan",
		slack.MsgOptionText("the final answer", false),
		slack.MsgOptionMetadata(slack.SlackMetadata{
			EventType:    "capstan_delivery",
			EventPayload: map[string]any{"operation_id": opID, "attempt": 2},
		}))
	if err != nil {
		t.Fatalf("post 2: %v", err)
	}
	if !(ts1 < ts2) {
		t.Errorf("timestamps %q then %q, want increasing", ts1, ts2)
	}

	// Like Slack, conversations.history takes the id, never the name.
	if _, err := client.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: "#capstan"}); err == nil || err.Error() != "channel_not_found" {
		t.Errorf("history of a name: %v, want channel_not_found", err)
	}
	hist, err := client.GetConversationHistory(&slack.GetConversationHistoryParameters{
		ChannelID:          channel,
		IncludeAllMetadata: true,
	})
	if err != nil {
		t.Fatalf("history: %v", err)
	}
	if len(hist.Messages) != 2 || hist.Messages[0].Timestamp != ts2 {
		t.Fatalf("history = %+v, want 2 messages newest first", hist.Messages)
	}
	md := hist.Messages[0].Metadata
	if md.EventType != "capstan_delivery" || md.EventPayload["operation_id"] != opID {
		t.Errorf("metadata = %+v, want the operation id", md)
	}
	if m := hist.Messages[0]; m.User != auth.UserID || m.BotID != auth.BotID || m.BotID == "" {
		t.Errorf("message by user %q bot %q, want auth.test's %q and %q", m.User, m.BotID, auth.UserID, auth.BotID)
	}

	// Without include_all_metadata, Slack leaves metadata out.
	plain, err := client.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: channel})
	if err != nil {
		t.Fatal(err)
	}
	if plain.Messages[0].Metadata.EventType != "" {
		t.Errorf("metadata returned without include_all_metadata: %+v", plain.Messages[0].Metadata)
	}

	// oldest is exclusive unless inclusive is set; limit pages.
	after, err := client.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: channel, Oldest: ts1})
	if err != nil {
		t.Fatal(err)
	}
	if len(after.Messages) != 1 || after.Messages[0].Timestamp != ts2 {
		t.Errorf("oldest=%s: %d messages, want only %s", ts1, len(after.Messages), ts2)
	}
	page, err := client.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: channel, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Messages) != 1 || !page.HasMore || page.ResponseMetaData.NextCursor == "" {
		t.Fatalf("limit 1: %+v", page)
	}
	rest, err := client.GetConversationHistory(&slack.GetConversationHistoryParameters{
		ChannelID: channel, Limit: 1, Cursor: page.ResponseMetaData.NextCursor,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rest.Messages) != 1 || rest.Messages[0].Timestamp != ts1 || rest.HasMore {
		t.Errorf("second page: %+v", rest)
	}

	msgs := fake.Messages("#capstan")
	if len(msgs) != 2 || msgs[1].Metadata.EventPayload["operation_id"] != opID || msgs[0].Metadata.EventType != "" {
		t.Errorf("Messages = %+v", msgs)
	}
	if len(fake.Messages("C0123")) != 0 {
		t.Errorf("another channel has messages")
	}
	if st := fake.Stats(); st.MessagesPosted != 2 || st.Requests != 9 {
		t.Errorf("stats = %+v, want 2 posted, 9 requests", st)
	}
}

func TestSlackNotAuthed(t *testing.T) {
	fake, apiURL := newSlackServer(t)
	client := slack.New("", slack.OptionAPIURL(apiURL))
	_, _, err := client.PostMessage("C0123", slack.MsgOptionText("hi", false))
	var se slack.SlackErrorResponse
	if !errors.As(err, &se) || se.Err != "not_authed" {
		t.Fatalf("err = %v, want not_authed", err)
	}
	if st := fake.Stats(); st.MessagesPosted != 0 {
		t.Errorf("posted without a token: %+v", st)
	}
}

func TestSlackUnknownMethodAndBadInput(t *testing.T) {
	_, apiURL := newSlackServer(t)
	cases := []struct {
		method string
		form   url.Values
		want   string
	}{
		{"chat.nope", url.Values{"token": {"t"}}, "unknown_method"},
		{"chat.postMessage", url.Values{"token": {"t"}, "text": {"x"}}, "channel_not_found"},
		{"chat.postMessage", url.Values{"token": {"t"}, "channel": {"C1"}}, "no_text"},
		{"chat.postMessage", url.Values{"token": {"t"}, "channel": {"C1"}, "text": {"x"}, "metadata": {"{"}}, "invalid_metadata_format"},
	}
	for _, c := range cases {
		resp, err := http.PostForm(apiURL+c.method, c.form)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			OK    bool
			Error string
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK || body.OK || body.Error != c.want {
			t.Errorf("%s %v: status %d, %+v, %v; want ok=false error=%s", c.method, c.form, resp.StatusCode, body, err, c.want)
		}
	}
}

// TestSlackJSONBody covers the other way Slack accepts arguments: a JSON body
// with the token in the Authorization header.
func TestSlackJSONBody(t *testing.T) {
	fake, apiURL := newSlackServer(t)
	req, _ := http.NewRequest(http.MethodPost, apiURL+"chat.postMessage", strings.NewReader(
		`{"channel":"capstan","text":"hi","metadata":{"event_type":"capstan_delivery","event_payload":{"operation_id":"op-1"}}}`))
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	req.Header.Set("Authorization", "Bearer xoxb-sandbox")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	msgs := fake.Messages("#capstan")
	if len(msgs) != 1 || msgs[0].Metadata.EventPayload["operation_id"] != "op-1" {
		t.Errorf("messages = %+v", msgs)
	}
}

func TestSlackFaultAnswersFirst(t *testing.T) {
	fake, apiURL := newSlackServer(t)
	fake.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		http.Error(w, "injected", http.StatusBadGateway)
		return true
	})
	client := slack.New("xoxb-sandbox", slack.OptionAPIURL(apiURL))
	_, _, err := client.PostMessage("#capstan", slack.MsgOptionText("hi", false))
	var sce slack.StatusCodeError
	if !errors.As(err, &sce) || sce.Code != http.StatusBadGateway {
		t.Fatalf("err = %v, want the injected 502", err)
	}
	var st SlackStats
	testenv.GetJSON(t, strings.TrimSuffix(apiURL, "/api/")+"/_sandbox/stats", &st)
	if st != (SlackStats{}) || len(fake.Messages("#capstan")) != 0 {
		t.Errorf("counters moved under a fault: %+v", st)
	}

	// A fault that lets the post happen and then loses the answer: the
	// effect is recorded although the client saw an error, which is what a
	// reconciler must find.
	fake.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		next.ServeHTTP(httptest.NewRecorder(), r)
		http.Error(w, "lost", http.StatusGatewayTimeout)
		return true
	})
	if _, _, err := client.PostMessage("#capstan", slack.MsgOptionText("hi", false)); err == nil {
		t.Fatal("want an error for the lost answer")
	}
	if st := fake.Stats(); st.MessagesPosted != 1 {
		t.Errorf("stats = %+v, want the post recorded", st)
	}
}

// Who a token is: auth.test answers it, and a message records it.
// SandboxUserToken writes as a person, with no bot id.
func TestSlackAuthors(t *testing.T) {
	fake, apiURL := newSlackServer(t)
	alice := slack.New(SandboxUserToken("alice"), slack.OptionAPIURL(apiURL))
	auth, err := alice.AuthTest()
	if err != nil || auth.UserID != "UALICE" || auth.BotID != "" || auth.User != "alice" {
		t.Fatalf("auth.test as alice = %+v, %v", auth, err)
	}
	if _, _, err := alice.PostMessage("#general", slack.MsgOptionText("hi", false)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := slack.New("xoxb-bot", slack.OptionAPIURL(apiURL)).PostMessage("#general", slack.MsgOptionText("beep", false)); err != nil {
		t.Fatal(err)
	}
	msgs := fake.Messages("general")
	if len(msgs) != 2 || msgs[0].User != "UALICE" || msgs[0].BotID != "" || msgs[1].User != slackUserID || msgs[1].BotID != slackBotID {
		t.Errorf("messages = %+v, want alice's then the bot's", msgs)
	}
	// An id nobody made is not a channel.
	if _, _, err := alice.PostMessage("C99999999", slack.MsgOptionText("hi", false)); err == nil || err.Error() != "channel_not_found" {
		t.Errorf("post to an unknown id: %v, want channel_not_found", err)
	}
}

// conversations.list pages every channel with cursors.
func TestSlackConversationsList(t *testing.T) {
	fake, apiURL := newSlackServer(t)
	client := slack.New("xoxb-bot", slack.OptionAPIURL(apiURL))
	want := map[string]string{SlackGeneral: SlackGeneralID}
	for i := range 5 {
		name := fmt.Sprintf("room-%d", i)
		channel, _, err := client.PostMessage("#"+name, slack.MsgOptionText("hi", false))
		if err != nil {
			t.Fatal(err)
		}
		want[name] = channel
	}
	got := map[string]string{}
	params := &slack.GetConversationsParameters{Limit: 2}
	for pages := 1; ; pages++ {
		chans, next, err := client.GetConversations(params)
		if err != nil {
			t.Fatal(err)
		}
		if len(chans) > 2 {
			t.Fatalf("page of %d channels, want at most 2", len(chans))
		}
		for _, c := range chans {
			got[c.Name] = c.ID
		}
		if next == "" {
			if pages != 3 {
				t.Errorf("%d pages, want 3", pages)
			}
			break
		}
		params.Cursor = next
	}
	if !maps.Equal(got, want) || fake.ChannelID("room-3") != want["room-3"] {
		t.Errorf("listed %v, want %v", got, want)
	}
}

// LimitHistory: one conversations.history request per interval (429 with
// the Retry-After left for the rest) and a smaller largest page.
func TestSlackHistoryLimit(t *testing.T) {
	fake, apiURL := newSlackServer(t)
	clock := NewManualClock(time.Unix(1_800_000_000, 0))
	fake.SetNow(clock.Now)
	client := slack.New("xoxb-bot", slack.OptionAPIURL(apiURL))
	var channel string
	for i := range 20 {
		c, _, err := client.PostMessage("#busy", slack.MsgOptionText(fmt.Sprint(i), false))
		if err != nil {
			t.Fatal(err)
		}
		channel = c
	}
	fake.LimitHistory(HistoryLimit{Every: time.Minute, PageMax: 15})
	page, err := client.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: channel, Limit: 200})
	if err != nil || len(page.Messages) != 15 || !page.HasMore {
		t.Fatalf("first page: %d messages, has_more %v, %v; want 15 and more", len(page.Messages), page.HasMore, err)
	}
	clock.Advance(20 * time.Second)
	_, err = client.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: channel, Cursor: page.ResponseMetaData.NextCursor})
	var limited *slack.RateLimitedError
	if !errors.As(err, &limited) || limited.RetryAfter != 40*time.Second {
		t.Fatalf("second request 20 s later: %v, want rate limited for 40 s", err)
	}
	clock.Advance(40 * time.Second)
	rest, err := client.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: channel, Cursor: page.ResponseMetaData.NextCursor})
	if err != nil || len(rest.Messages) != 5 || rest.HasMore {
		t.Fatalf("after the interval: %+v, %v; want the last 5", rest, err)
	}
	fake.LimitHistory(HistoryLimit{})
	for range 2 {
		if _, err := client.GetConversationHistory(&slack.GetConversationHistoryParameters{ChannelID: channel}); err != nil {
			t.Fatalf("limit lifted: %v", err)
		}
	}
}
