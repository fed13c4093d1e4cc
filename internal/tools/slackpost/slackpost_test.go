package slackpost_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/tools"
	"github.com/capstanhq/capstan/internal/tools/slackpost"
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
	find := func(channel, opID string, since time.Time) (tools.Observation, error) {
		t.Helper()
		effect, err := slackpost.NewMessages(sc).Effect(tools.Sent{
			Call: tools.Call{OperationID: opID, Arguments: slackpost.Arguments(channel)}, Since: since})
		if err != nil {
			t.Fatal(err)
		}
		return effect.Find(ctx)
	}
	post := func(opt slack.MsgOption) string {
		t.Helper()
		_, ts, err := sc.PostMessageContext(ctx, "#ops", slack.MsgOptionText("the answer", false), opt)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	expect := func(what string, obs tools.Observation, err error, want tools.Outcome, externalID string) {
		t.Helper()
		if err != nil || obs.Outcome != want || obs.ExternalID != externalID || obs.Detail == "" {
			t.Fatalf("%s: %+v, %v; want %s with external id %q and a detail", what, obs, err, want, externalID)
		}
	}

	obs, err := find("#ops", "op-s", claimed)
	expect("no message", obs, err, tools.NotSeen, "")
	post(slack.MsgOptionAsUser(false))
	post(slack.MsgOptionMetadata(slackpost.Metadata("op-other", "T")))
	post(slack.MsgOptionMetadata(slack.SlackMetadata{EventType: "someone_elses_event",
		EventPayload: map[string]any{"operation_id": "op-s"}}))
	obs, err = find("#ops", "op-s", claimed)
	expect("messages that are not ours", obs, err, tools.NotSeen, "")

	ts := post(slack.MsgOptionMetadata(slackpost.Metadata("op-s", "T")))
	obs, err = find("#ops", "op-s", claimed)
	expect("our message", obs, err, tools.Found, "#ops/"+ts)
	obs, err = find("#elsewhere", "op-s", claimed)
	expect("another channel", obs, err, tools.NotSeen, "")
	obs, err = find("#ops", "op-s", claimed.Add(time.Hour))
	expect("a claim after the message", obs, err, tools.NotSeen, "")

	if err := sb.AddFault(sandbox.FaultRule{Endpoint: "conversations.history", Kind: sandbox.FaultLag, Lag: time.Hour, Times: 1}); err != nil {
		t.Fatal(err)
	}
	obs, err = find("#ops", "op-s", claimed)
	expect("a lagging history", obs, err, tools.NotSeen, "")

	post(slack.MsgOptionMetadata(slackpost.Metadata("op-s", "T")))
	obs, err = find("#ops", "op-s", claimed)
	expect("two messages with our id", obs, err, tools.Ambiguous, "")

	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "conversations.history", Kind: sandbox.FaultFail, Times: 1},
		{Endpoint: "conversations.history", Kind: sandbox.FaultRateLimit, RetryAfter: time.Second, Times: 1},
	} {
		if err := sb.AddFault(rule); err != nil {
			t.Fatal(err)
		}
		if obs, err := find("#ops", "op-s", claimed); err == nil || obs != (tools.Observation{}) {
			t.Fatalf("conversations.history %s: %+v, %v; want an error and no observation", rule.Kind, obs, err)
		}
	}
}

func TestMessagesEffectRefuses(t *testing.T) {
	sc := slack.New("xoxb-test", slack.OptionAPIURL("http://127.0.0.1:1/api/"))
	if _, err := slackpost.NewMessages(nil).Effect(tools.Sent{Call: tools.Call{OperationID: "op", Arguments: slackpost.Arguments("C1")}}); !errors.Is(err, tools.ErrNotConfigured) {
		t.Errorf("without a client: %v, want tools.ErrNotConfigured", err)
	}
	for name, s := range map[string]tools.Sent{
		"no channel":      {Call: tools.Call{OperationID: "op", Arguments: slackpost.Arguments("")}},
		"no arguments":    {Call: tools.Call{OperationID: "op"}},
		"bad arguments":   {Call: tools.Call{OperationID: "op", Arguments: json.RawMessage(`{"channel":1}`)}},
		"no operation id": {Call: tools.Call{Arguments: slackpost.Arguments("C1")}},
	} {
		if e, err := slackpost.NewMessages(sc).Effect(s); err == nil || errors.Is(err, tools.ErrNotConfigured) {
			t.Errorf("%s: %v, %v; want an error that is not ErrNotConfigured", name, e, err)
		}
	}
}
