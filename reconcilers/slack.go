package reconcilers

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"
)

// SlackHistory reads a channel's history; *slack.Client satisfies it.
type SlackHistory interface {
	GetConversationHistoryContext(ctx context.Context, params *slack.GetConversationHistoryParameters) (*slack.GetConversationHistoryResponse, error)
}

// Slack asks Slack.
type Slack struct{ c SlackHistory }

// NewSlack returns the Slack reconciler over c.
func NewSlack(c SlackHistory) *Slack { return &Slack{c: c} }

// MessageQuery looks for the message an operation posted.
type MessageQuery struct {
	Channel     string // as the message was posted to it
	OperationID string
	// EventType is the metadata event type the poster set; the payload's
	// "operation_id" names the operation.
	EventType string
	Since     time.Time // when the operation was claimed
}

func messageQuery(t Target) (MessageQuery, error) {
	if err := required(t.Kind, [2]string{"channel", t.Channel}, [2]string{"event type", t.EventType}); err != nil {
		return MessageQuery{}, err
	}
	return MessageQuery{Channel: t.Channel, OperationID: t.OperationID, EventType: t.EventType, Since: t.Since}, nil
}

// historyPage is the page size asked of conversations.history.
const historyPage = 200

// Message reads the channel's history from the claim, minus ClockMargin,
// with all metadata, and picks the messages whose metadata has EventType and
// the operation id: one is Found ("<channel>/<ts>", as Deliver records it),
// several are Ambiguous, none is NotSeen.
func (s *Slack) Message(ctx context.Context, q MessageQuery) (Observation, error) {
	oldest := q.Since.Add(-ClockMargin)
	params := &slack.GetConversationHistoryParameters{ChannelID: q.Channel, Limit: historyPage,
		Oldest: fmt.Sprintf("%d.%06d", oldest.Unix(), oldest.Nanosecond()/1e3), IncludeAllMetadata: true}
	what := fmt.Sprintf("messages in %s since %s", q.Channel, oldest.UTC().Format(time.RFC3339))
	listed := 0
	var matches []string
	for page := 1; ; page++ {
		resp, err := s.c.GetConversationHistoryContext(ctx, params)
		if err != nil {
			return Observation{}, fmt.Errorf("read %s: %w", what, err)
		}
		listed += len(resp.Messages)
		for _, m := range resp.Messages {
			if m.Metadata.EventType == q.EventType && m.Metadata.EventPayload["operation_id"] == q.OperationID {
				matches = append(matches, m.Timestamp)
			}
		}
		next := resp.ResponseMetaData.NextCursor
		if !resp.HasMore || next == "" {
			break
		}
		if page == maxPages {
			return Observation{}, fmt.Errorf("read %s: more than %d pages", what, maxPages)
		}
		params.Cursor = next
	}
	switch len(matches) {
	case 0:
		return Observation{Outcome: NotSeen, Detail: fmt.Sprintf("none of the %d %s carries the operation's id", listed, what)}, nil
	case 1:
		return Observation{Outcome: Found, ExternalID: q.Channel + "/" + matches[0],
			Detail: fmt.Sprintf("message %s of the %d %s carries the operation's id", matches[0], listed, what)}, nil
	default:
		return Observation{Outcome: Ambiguous,
			Detail: fmt.Sprintf("%d %s carry the operation's id: %s", len(matches), what, strings.Join(matches, ", "))}, nil
	}
}
