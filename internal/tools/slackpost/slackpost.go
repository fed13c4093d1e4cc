// Package slackpost is the Slack message a task's final answer is
// delivered as, seen as an effect: the mark the delivery leaves on the
// message (metadata naming the operation, Metadata) and the lookup that
// finds the message again when Slack's answer to the post was lost
// (Messages, a tools.Finder). Posting it is activities.Deliver's.
package slackpost

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan/internal/tools"
)

// Kind is the kind the ledger records for a Slack delivery's operation.
const Kind = "slack_post"

// EventType is the metadata event type of capstan's messages.
const EventType = "capstan_delivery"

// Metadata is the mark a delivery leaves on its message: EventType, with
// the operation id (by which Messages finds it) and the task id in the
// payload.
func Metadata(operationID, taskID string) slack.SlackMetadata {
	return slack.SlackMetadata{
		EventType:    EventType,
		EventPayload: map[string]any{"operation_id": operationID, "task_id": taskID},
	}
}

// arguments are what the lookup needs of a delivery: the channel, as the
// message was posted to it.
type arguments struct {
	Channel string `json:"channel"`
}

// Arguments are the arguments of a delivery to channel, as Messages reads
// them.
func Arguments(channel string) json.RawMessage {
	b, _ := json.Marshal(arguments{Channel: channel}) // cannot fail: a string
	return b
}

// History reads a channel's history; *slack.Client satisfies it.
type History interface {
	GetConversationHistoryContext(ctx context.Context, params *slack.GetConversationHistoryParameters) (*slack.GetConversationHistoryResponse, error)
}

// Messages finds delivered messages again: the tools.Finder of the
// operations of Kind.
type Messages struct{ c History }

// NewMessages returns the lookup of delivered messages over c. A nil c
// makes every lookup fail with tools.ErrNotConfigured.
func NewMessages(c History) *Messages { return &Messages{c: c} }

// Name is Kind.
func (m *Messages) Name() string { return Kind }

// Effect reads the channel from s.Arguments (see Arguments).
func (m *Messages) Effect(s tools.Sent) (tools.Effect, error) {
	if m.c == nil {
		return nil, fmt.Errorf("%s: %w: no Slack client (set SLACK_BOT_TOKEN)", Kind, tools.ErrNotConfigured)
	}
	var a arguments
	if err := json.Unmarshal(s.Arguments, &a); err != nil {
		return nil, fmt.Errorf("%s: the arguments do not decode: %w", Kind, err)
	}
	switch {
	case a.Channel == "":
		return nil, errors.New(Kind + `: argument "channel" is empty`)
	case s.OperationID == "":
		return nil, errors.New(Kind + ": no operation id, so the message cannot be recognised")
	}
	return messageEffect{c: m.c, channel: a.Channel, opID: s.OperationID, since: s.Since}, nil
}

// historyPage is the page size asked of conversations.history, and
// maxPages the most pages read: a longer history cannot be searched, and
// the question counts as not asked.
const (
	historyPage = 200
	maxPages    = 50
)

// messageEffect is the message a delivery posted.
type messageEffect struct {
	c       History
	channel string
	opID    string
	since   time.Time // when the operation was claimed
}

func (e messageEffect) Key() string {
	return fmt.Sprintf("a message in %s whose %s metadata names operation %s", e.channel, EventType, e.opID)
}

// Find reads the channel's history from the claim, minus tools.ClockMargin,
// with all metadata, and picks the messages whose metadata has EventType and
// the operation id: one is Found ("<channel>/<ts>", as Deliver records it),
// several are Ambiguous, none is NotSeen.
func (e messageEffect) Find(ctx context.Context) (tools.Observation, error) {
	oldest := e.since.Add(-tools.ClockMargin)
	params := &slack.GetConversationHistoryParameters{ChannelID: e.channel, Limit: historyPage,
		Oldest: fmt.Sprintf("%d.%06d", oldest.Unix(), oldest.Nanosecond()/1e3), IncludeAllMetadata: true}
	what := fmt.Sprintf("messages in %s since %s", e.channel, oldest.UTC().Format(time.RFC3339))
	listed := 0
	var matches []string
	for page := 1; ; page++ {
		resp, err := e.c.GetConversationHistoryContext(ctx, params)
		if err != nil {
			return tools.Observation{}, fmt.Errorf("read %s: %w", what, err)
		}
		listed += len(resp.Messages)
		for _, m := range resp.Messages {
			if m.Metadata.EventType == EventType && m.Metadata.EventPayload["operation_id"] == e.opID {
				matches = append(matches, m.Timestamp)
			}
		}
		next := resp.ResponseMetaData.NextCursor
		if !resp.HasMore || next == "" {
			break
		}
		if page == maxPages {
			return tools.Observation{}, fmt.Errorf("read %s: more than %d pages", what, maxPages)
		}
		params.Cursor = next
	}
	switch len(matches) {
	case 0:
		return tools.Observation{Outcome: tools.NotSeen, Detail: fmt.Sprintf("none of the %d %s carries the operation's id", listed, what)}, nil
	case 1:
		return tools.Observation{Outcome: tools.Found, ExternalID: e.channel + "/" + matches[0],
			Detail: fmt.Sprintf("message %s of the %d %s carries the operation's id", matches[0], listed, what)}, nil
	default:
		return tools.Observation{Outcome: tools.Ambiguous,
			Detail: fmt.Sprintf("%d %s carry the operation's id: %s", len(matches), what, strings.Join(matches, ", "))}, nil
	}
}
