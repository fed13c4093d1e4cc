package slackpost_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/tools/slackpost"
	"github.com/capstanhq/capstan/tool"
)

// The lookup runs against the sandbox's Slack on loopback, with the real
// slack-go client, and finds messages marked as Deliver marks them
// (slackpost.Metadata).

func TestMessagesLookup(t *testing.T) {
	sb := sandbox.NewSlack()
	srv := httptest.NewServer(sb)
	t.Cleanup(srv.Close)
	sc := slack.New("xoxb-test", slack.OptionAPIURL(srv.URL+"/api/"))
	ctx := context.Background()
	claimed := time.Now()
	find := func(channel, opID string, since time.Time) (tool.Observation, error) {
		t.Helper()
		effect, err := slackpost.NewMessages(sc).Effect(tool.Sent{
			Call: tool.Call{OperationID: opID, Arguments: slackpost.Arguments(channel)}, Since: since})
		if err != nil {
			t.Fatal(err)
		}
		return effect.Find(ctx)
	}
	postAs := func(c *slack.Client, channel string, opt slack.MsgOption) string {
		t.Helper()
		_, ts, err := c.PostMessageContext(ctx, channel, slack.MsgOptionText("the answer", false), opt)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	post := func(opt slack.MsgOption) string { t.Helper(); return postAs(sc, "#ops", opt) }
	expect := func(what string, obs tool.Observation, err error, want tool.Outcome, externalID string) {
		t.Helper()
		if err != nil || obs.Outcome != want || obs.ExternalID != externalID || obs.Detail == "" {
			t.Fatalf("%s: %+v, %v; want %s with external id %q and a detail", what, obs, err, want, externalID)
		}
	}

	obs, err := find("#ops", "op-s", claimed)
	expect("no such channel", obs, err, tool.NotSeen, "")
	post(slack.MsgOptionAsUser(false))
	obs, err = find("#ops", "op-s", claimed)
	expect("no message", obs, err, tool.NotSeen, "")
	post(slack.MsgOptionMetadata(slackpost.Metadata("op-other", "T")))
	post(slack.MsgOptionMetadata(slack.SlackMetadata{EventType: "someone_elses_event",
		EventPayload: map[string]any{"operation_id": "op-s"}}))
	obs, err = find("#ops", "op-s", claimed)
	expect("messages that are not ours", obs, err, tool.NotSeen, "")

	// Someone else copies our metadata: not ours, and named as ignored.
	alice := slack.New(sandbox.SandboxUserToken("alice"), slack.OptionAPIURL(srv.URL+"/api/"))
	forged := postAs(alice, "#ops", slack.MsgOptionMetadata(slackpost.Metadata("op-s", "T")))
	obs, err = find("#ops", "op-s", claimed)
	expect("our metadata on alice's message", obs, err, tool.NotSeen, "")
	if !strings.Contains(obs.Detail, forged+" by UALICE") {
		t.Errorf("detail %q should name alice's message as ignored", obs.Detail)
	}

	// Found under the channel's id, as Deliver records Slack's answer,
	// whether the delivery named the channel or its id.
	ts := post(slack.MsgOptionMetadata(slackpost.Metadata("op-s", "T")))
	id := sb.ChannelID("#ops")
	for _, channel := range []string{"#ops", "ops", id} {
		obs, err = find(channel, "op-s", claimed)
		expect("our message in "+channel, obs, err, tool.Found, id+"/"+ts)
	}
	postAs(sc, "#elsewhere", slack.MsgOptionAsUser(false))
	obs, err = find("#elsewhere", "op-s", claimed)
	expect("another channel", obs, err, tool.NotSeen, "")
	obs, err = find("#ops", "op-s", claimed.Add(time.Hour))
	expect("a claim after the message", obs, err, tool.NotSeen, "")

	if err := sb.AddFault(sandbox.FaultRule{Endpoint: "conversations.history", Kind: sandbox.FaultLag, Lag: time.Hour, Times: 1}); err != nil {
		t.Fatal(err)
	}
	obs, err = find("#ops", "op-s", claimed)
	expect("a lagging history", obs, err, tool.NotSeen, "")

	post(slack.MsgOptionMetadata(slackpost.Metadata("op-s", "T")))
	obs, err = find("#ops", "op-s", claimed)
	expect("two messages with our id", obs, err, tool.Ambiguous, "")

	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "conversations.history", Kind: sandbox.FaultFail, Times: 1},
		{Endpoint: "auth.test", Kind: sandbox.FaultFail, Times: 1},
		{Endpoint: "conversations.list", Kind: sandbox.FaultFail, Times: 1},
	} {
		if err := sb.AddFault(rule); err != nil {
			t.Fatal(err)
		}
		if obs, err := find("#ops", "op-s", claimed); err == nil || obs != (tool.Observation{}) {
			t.Fatalf("%s %s: %+v, %v; want an error and no observation", rule.Endpoint, rule.Kind, obs, err)
		}
	}
}

// Within Slack's limits for apps outside its Marketplace: the lookup reads
// only from the claim on, 15 messages a page, follows cursors, and waits out
// a 429's Retry-After — saying so — instead of failing. Who capstan is and
// a channel's id are asked once per Messages.
func TestMessagesLookupWithinSlackLimits(t *testing.T) {
	sb := sandbox.NewSlack()
	srv := httptest.NewServer(sb)
	t.Cleanup(srv.Close)
	sc := slack.New("xoxb-test", slack.OptionAPIURL(srv.URL+"/api/"))
	ctx := context.Background()

	// 250 channels: the name is found on conversations.list's second page.
	for i := range 250 {
		if _, _, err := sc.PostMessageContext(ctx, fmt.Sprintf("#room-%03d", i), slack.MsgOptionText("hi", false)); err != nil {
			t.Fatal(err)
		}
	}
	claimed := time.Now()
	_, ts, err := sc.PostMessageContext(ctx, "#room-249", slack.MsgOptionText("done", false),
		slack.MsgOptionMetadata(slackpost.Metadata("op-limits", "T")))
	if err != nil {
		t.Fatal(err)
	}
	// Twenty more bury it: it is on the second page of 15.
	for i := range 20 {
		if _, _, err := sc.PostMessageContext(ctx, "#room-249", slack.MsgOptionText(fmt.Sprint(i), false)); err != nil {
			t.Fatal(err)
		}
	}

	sb.LimitHistory(sandbox.HistoryLimit{Every: time.Second, PageMax: 15})
	var notices []string
	var mu sync.Mutex
	wctx := tool.WithWaitNotice(ctx, func(why string) { mu.Lock(); notices = append(notices, why); mu.Unlock() })
	m := slackpost.NewMessages(sc)
	effect, err := m.Effect(tool.Sent{Call: tool.Call{OperationID: "op-limits", Arguments: slackpost.Arguments("#room-249")}, Since: claimed})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := effect.Find(wctx)
	id := sb.ChannelID("#room-249")
	if err != nil || obs.Outcome != tool.Found || obs.ExternalID != id+"/"+ts {
		t.Fatalf("Find = %+v, %v; want found at %s/%s", obs, err, id, ts)
	}
	if len(notices) == 0 || !strings.Contains(notices[0], "Retry-After") || !strings.Contains(obs.Detail, "rate-limited") {
		t.Errorf("notices %q, detail %q; want the wait for the second page told and noted", notices, obs.Detail)
	}

	// Asked again on the same Messages: auth.test and conversations.list
	// failing now would show if they were asked again.
	for _, ep := range []string{"auth.test", "conversations.list"} {
		if err := sb.AddFault(sandbox.FaultRule{Endpoint: ep, Kind: sandbox.FaultFail}); err != nil {
			t.Fatal(err)
		}
	}
	sb.LimitHistory(sandbox.HistoryLimit{})
	if obs, err := effect.Find(ctx); err != nil || obs.Outcome != tool.Found {
		t.Errorf("second Find = %+v, %v; want found without asking who or where again", obs, err)
	}
}

func TestMessagesEffectRefuses(t *testing.T) {
	sc := slack.New("xoxb-test", slack.OptionAPIURL("http://127.0.0.1:1/api/"))
	if _, err := slackpost.NewMessages(nil).Effect(tool.Sent{Call: tool.Call{OperationID: "op", Arguments: slackpost.Arguments("C1")}}); !errors.Is(err, tool.ErrNotConfigured) {
		t.Errorf("without a client: %v, want tool.ErrNotConfigured", err)
	}
	for name, s := range map[string]tool.Sent{
		"no channel":      {Call: tool.Call{OperationID: "op", Arguments: slackpost.Arguments("")}},
		"no arguments":    {Call: tool.Call{OperationID: "op"}},
		"bad arguments":   {Call: tool.Call{OperationID: "op", Arguments: json.RawMessage(`{"channel":1}`)}},
		"no operation id": {Call: tool.Call{Arguments: slackpost.Arguments("C1")}},
	} {
		if e, err := slackpost.NewMessages(sc).Effect(s); err == nil || errors.Is(err, tool.ErrNotConfigured) {
			t.Errorf("%s: %v, %v; want an error that is not ErrNotConfigured", name, e, err)
		}
	}
}

// countingHistory counts the conversations.history requests it passes on.
type countingHistory struct {
	slackpost.History
	mu    sync.Mutex
	reads int
}

func (c *countingHistory) GetConversationHistoryContext(ctx context.Context, p *slack.GetConversationHistoryParameters) (*slack.GetConversationHistoryResponse, error) {
	c.mu.Lock()
	c.reads++
	c.mu.Unlock()
	return c.History.GetConversationHistoryContext(ctx, p)
}

func (c *countingHistory) count() int { c.mu.Lock(); defer c.mu.Unlock(); return c.reads }

// Slack limits conversations.history per app, so the checks pending in one
// channel share its reads (issue 18): twelve checks at once cost one read.
// A read that began before a question answers it only with what it saw: a
// message posted since, or one it did not see, takes a read of its own.
func TestMessagesChecksInOneChannelShareARead(t *testing.T) {
	sb := sandbox.NewSlack()
	srv := httptest.NewServer(sb)
	t.Cleanup(srv.Close)
	sc := slack.New("xoxb-test", slack.OptionAPIURL(srv.URL+"/api/"))
	ctx := context.Background()
	claimed := time.Now()
	const n = 12
	for i := range n {
		if _, _, err := sc.PostMessageContext(ctx, "#shared", slack.MsgOptionText("done", false),
			slack.MsgOptionMetadata(slackpost.Metadata(fmt.Sprintf("op-%d", i), "T"))); err != nil {
			t.Fatal(err)
		}
	}
	hist := &countingHistory{History: sc}
	m := slackpost.NewMessages(hist)
	find := func(opID string) (tool.Observation, error) {
		effect, err := m.Effect(tool.Sent{Call: tool.Call{OperationID: opID, Arguments: slackpost.Arguments("#shared")}, Since: claimed})
		if err != nil {
			t.Fatal(err)
		}
		return effect.Find(ctx)
	}
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			if obs, err := find(fmt.Sprintf("op-%d", i)); err != nil || obs.Outcome != tool.Found {
				t.Errorf("check %d: %+v, %v; want found", i, obs, err)
			}
		})
	}
	wg.Wait()
	if got := hist.count(); got != 1 {
		t.Fatalf("%d pending checks in one channel read its history %d times, want 1", n, got)
	}

	// Not seen by the shared read: a question asked since needs a read
	// begun after it, which finds a message posted meanwhile.
	if _, _, err := sc.PostMessageContext(ctx, "#shared", slack.MsgOptionText("late", false),
		slack.MsgOptionMetadata(slackpost.Metadata("op-late", "T"))); err != nil {
		t.Fatal(err)
	}
	if obs, err := find("op-late"); err != nil || obs.Outcome != tool.Found || hist.count() != 2 {
		t.Errorf("a message posted after the shared read: %+v, %v after %d reads; want found by a second read", obs, err, hist.count())
	}
	if obs, err := find("op-never"); err != nil || obs.Outcome != tool.NotSeen || hist.count() != 3 {
		t.Errorf("a message never posted: %+v, %v after %d reads; want not seen by a read of its own", obs, err, hist.count())
	}
}
