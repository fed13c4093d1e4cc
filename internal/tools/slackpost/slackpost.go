// Package slackpost is the Slack message a task's final answer is
// delivered as, seen as an effect: the mark the delivery leaves on the
// message (metadata naming the operation, Metadata) and the lookup that
// finds the message again when Slack's answer to the post was lost
// (Messages, a tool.Finder). The mark counts only on a message capstan
// posted (auth.test's identity): anyone can copy metadata. The lookup
// works within Slack's limits on conversations.history — a channel id,
// not a name; about one request a minute and 15 messages a page for apps
// outside its Marketplace — by resolving names once, reading only from the
// send on, sharing one read of a channel among the checks pending there,
// and waiting out a 429's Retry-After. Posting it is
// activities.Deliver's.
package slackpost

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"

	"github.com/capstanhq/capstan/tool"
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

// History is what the lookup asks Slack; *slack.Client satisfies it.
type History interface {
	// AuthTestContext tells who capstan is on Slack (auth.test).
	AuthTestContext(ctx context.Context) (*slack.AuthTestResponse, error)
	// GetConversationsContext lists channels (conversations.list), to
	// resolve a channel name to its id.
	GetConversationsContext(ctx context.Context, params *slack.GetConversationsParameters) ([]slack.Channel, string, error)
	// GetConversationHistoryContext reads a channel's messages
	// (conversations.history), which takes a channel id, never a name.
	GetConversationHistoryContext(ctx context.Context, params *slack.GetConversationHistoryParameters) (*slack.GetConversationHistoryResponse, error)
}

// Messages finds delivered messages again: the tool.Finder of the
// operations of Kind. It keeps, for the life of the value (one per worker),
// who capstan is on Slack and the ids of the channels it looked up, and
// it shares each channel's history reads among the questions pending
// there (historyReads: one read serves every check in the channel). It is
// safe for concurrent use.
type Messages struct {
	c History

	mu       sync.Mutex        // held while asking, so concurrent lookups ask once
	self     *slackSelf        // nil until auth.test answered
	channels map[string]string // channel name (without "#") -> id
	reads    historyReads      // the channels' history reads, shared among questions (shared.go)
}

// slackSelf is who capstan is on Slack, as auth.test answered.
type slackSelf struct{ userID, botID string }

// NewMessages returns the lookup of delivered messages over c. A nil c
// makes every lookup fail with tool.ErrNotConfigured.
func NewMessages(c History) *Messages {
	return &Messages{c: c, channels: map[string]string{}, reads: historyReads{now: time.Now}}
}

// Name is Kind.
func (m *Messages) Name() string { return Kind }

// Effect reads the channel from s.Arguments (see Arguments).
func (m *Messages) Effect(s tool.Sent) (tool.Effect, error) {
	if m.c == nil {
		return nil, fmt.Errorf("%s: %w: no Slack client (set SLACK_BOT_TOKEN)", Kind, tool.ErrNotConfigured)
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
	return messageEffect{m: m, channel: a.Channel, opID: s.OperationID, since: s.Since}, nil
}

// Slack limits conversations.history, for apps outside its Marketplace, to
// about one request a minute and historyPage messages a page; the lookup
// reads at most maxPages pages — a longer history since the send cannot be
// searched, and the question counts as not asked. conversations.list is
// read listPage channels at a time, at most maxListPages pages.
const (
	historyPage  = 15
	maxPages     = 100
	listPage     = 200
	maxListPages = 100
)

// messageEffect is the message a delivery posted.
type messageEffect struct {
	m       *Messages
	channel string // as the delivery named it: an id, or a name with or without "#"
	opID    string
	since   time.Time // when the operation was claimed
}

func (e messageEffect) Key() string {
	return fmt.Sprintf("a message in %s posted by capstan whose %s metadata names operation %s", e.channel, EventType, e.opID)
}

// Find reads the channel's history from the claim, minus tool.ClockMargin,
// with all metadata, following cursors, and picks the messages capstan
// posted (auth.test's bot id, or user id for a user token) whose metadata
// has EventType and the operation id: one is Found ("<channel id>/<ts>", as
// Deliver records it from Slack's answer), several are Ambiguous, none is
// NotSeen. A message by anyone else carrying the metadata is a copy, named
// in the detail as ignored. A channel name is resolved to its id first
// (conversations.history takes only ids). When Slack rate-limits a request
// Find waits the Retry-After it asked for, saying so through
// tool.NoticeWait, and asks again; a failure to ask anything else — who
// capstan is, the channel's id, a page — is an error: not asked. A name no
// channel visible to capstan has is NotSeen: capstan cannot have posted
// there, and a post sent again is refused, not doubled.
func (e messageEffect) Find(ctx context.Context) (tool.Observation, error) {
	self, err := e.m.whoAmI(ctx)
	if err != nil {
		return tool.Observation{}, err
	}
	id, err := e.m.channelID(ctx, e.channel)
	switch {
	case errors.Is(err, errNoSuchChannel):
		// capstan cannot have posted where it sees no channel; and a post
		// sent again to that name is refused (channel_not_found), never
		// doubled.
		return tool.Observation{Outcome: tool.NotSeen, Detail: fmt.Sprintf("no channel named %s is visible to capstan", e.channel)}, nil
	case err != nil:
		return tool.Observation{}, err
	}
	oldest := e.since.Add(-tool.ClockMargin)
	what := fmt.Sprintf("messages in %s since %s", e.channel, oldest.UTC().Format(time.RFC3339))
	ours := func(msgs []slack.Message) bool {
		return slices.ContainsFunc(msgs, func(m slack.Message) bool {
			return m.Metadata.EventType == EventType && m.Metadata.EventPayload["operation_id"] == e.opID && self.posted(m)
		})
	}
	r, err := e.m.reads.read(ctx, id, oldest, ours, func(ctx context.Context, from time.Time) ([]slack.Message, string, error) {
		return e.m.history(ctx, e.channel, id, from)
	})
	if err != nil {
		return tool.Observation{}, fmt.Errorf("read %s: %w", what, err)
	}
	var matches, forged []string
	listed := 0
	for _, m := range r.msgs {
		if ts, ok := slackTime(m.Timestamp); ok && ts.Before(oldest) {
			continue // a shared read from earlier on; not this question's
		}
		listed++
		switch {
		case m.Metadata.EventType != EventType || m.Metadata.EventPayload["operation_id"] != e.opID:
		case self.posted(m):
			matches = append(matches, m.Timestamp)
		default:
			forged = append(forged, fmt.Sprintf("%s by %s", m.Timestamp, cmp.Or(m.BotID, m.User)))
		}
	}
	note := r.note
	if len(forged) > 0 {
		note += fmt.Sprintf(" (ignored, as not posted by capstan: %s)", strings.Join(forged, ", "))
	}
	switch len(matches) {
	case 0:
		return tool.Observation{Outcome: tool.NotSeen, Detail: fmt.Sprintf("none of the %d %s posted by capstan carries the operation's id%s", listed, what, note)}, nil
	case 1:
		return tool.Observation{Outcome: tool.Found, ExternalID: id + "/" + matches[0],
			Detail: fmt.Sprintf("message %s of the %d %s carries the operation's id%s", matches[0], listed, what, note)}, nil
	default:
		return tool.Observation{Outcome: tool.Ambiguous,
			Detail: fmt.Sprintf("%d %s posted by capstan carry the operation's id: %s%s", len(matches), what, strings.Join(matches, ", "), note)}, nil
	}
}

// history reads channel (whose id is id) from oldest on, with all
// metadata, following cursors, waiting out Slack's rate limits: every
// message and a note of the waits.
func (m *Messages) history(ctx context.Context, channel, id string, oldest time.Time) ([]slack.Message, string, error) {
	params := &slack.GetConversationHistoryParameters{ChannelID: id, Limit: historyPage,
		Oldest: fmt.Sprintf("%d.%06d", oldest.Unix(), oldest.Nanosecond()/1e3), IncludeAllMetadata: true}
	var w waited
	var msgs []slack.Message
	for page := 1; ; page++ {
		var resp *slack.GetConversationHistoryResponse
		err := w.retryLimited(ctx, "conversations.history of "+channel, func() (err error) {
			resp, err = m.c.GetConversationHistoryContext(ctx, params)
			return err
		})
		if err != nil {
			return nil, "", err
		}
		msgs = append(msgs, resp.Messages...)
		next := resp.ResponseMetaData.NextCursor
		if !resp.HasMore || next == "" {
			return msgs, w.note(), nil
		}
		if page == maxPages {
			return nil, "", fmt.Errorf("more than %d pages", maxPages)
		}
		params.Cursor = next
	}
}

// posted reports whether capstan posted m: a bot token's messages carry its
// bot id, a user token's its user id.
func (s *slackSelf) posted(m slack.Message) bool {
	if s.botID != "" {
		return m.BotID == s.botID
	}
	return m.BotID == "" && m.User == s.userID
}

// whoAmI asks auth.test once; a failed question is asked again next time.
func (m *Messages) whoAmI(ctx context.Context) (*slackSelf, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.self != nil {
		return m.self, nil
	}
	var resp *slack.AuthTestResponse
	var w waited
	err := w.retryLimited(ctx, "auth.test", func() (err error) {
		resp, err = m.c.AuthTestContext(ctx)
		return err
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("ask Slack who capstan is (auth.test): %w", err)
	case resp.UserID == "" && resp.BotID == "":
		return nil, errors.New("auth.test answered neither a user id nor a bot id")
	}
	m.self = &slackSelf{userID: resp.UserID, botID: resp.BotID}
	return m.self, nil
}

// channelID returns channel's id: an id is taken as given; a name, with or
// without "#", is looked up in conversations.list (paged) once and kept.
func (m *Messages) channelID(ctx context.Context, channel string) (string, error) {
	name, named := strings.CutPrefix(channel, "#")
	if !named && isChannelID(channel) {
		return channel, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if id, ok := m.channels[name]; ok {
		return id, nil
	}
	params := &slack.GetConversationsParameters{ExcludeArchived: true, Limit: listPage,
		Types: []string{"public_channel", "private_channel"}}
	var w waited
	for page := 1; page <= maxListPages; page++ {
		var chans []slack.Channel
		var next string
		err := w.retryLimited(ctx, "conversations.list", func() (err error) {
			chans, next, err = m.c.GetConversationsContext(ctx, params)
			return err
		})
		if err != nil {
			return "", fmt.Errorf("find the id of channel %s (conversations.list): %w", channel, err)
		}
		for _, c := range chans {
			m.channels[c.Name] = c.ID
		}
		if id, ok := m.channels[name]; ok {
			return id, nil
		}
		if next == "" {
			return "", fmt.Errorf("find the id of channel %s: %w", channel, errNoSuchChannel)
		}
		params.Cursor = next
	}
	return "", fmt.Errorf("find the id of channel %s: more than %d pages of channels", channel, maxListPages)
}

// errNoSuchChannel: conversations.list, read to its end, names no channel
// of that name.
var errNoSuchChannel = errors.New("no channel of that name is visible to capstan")

// isChannelID reports whether s looks like a Slack conversation id
// (C…, G… or D…, upper-case letters and digits), not a name: names are
// lower-case.
func isChannelID(s string) bool {
	if len(s) < 2 || !strings.ContainsRune("CGD", rune(s[0])) {
		return false
	}
	for _, r := range s {
		if (r < 'A' || r > 'Z') && (r < '0' || r > '9') {
			return false
		}
	}
	return true
}

// maxRateLimitWaits bounds the Retry-After waits of one request: Slack
// answering 429 that often means something other than a rate limit.
const maxRateLimitWaits = 10

// waited counts the rate-limit waits of one question.
type waited struct {
	n     int
	total time.Duration
}

// retryLimited runs ask; while Slack answers it 429 (*slack.RateLimitedError)
// it tells tool.NoticeWait, waits the Retry-After Slack asked for, and asks
// again, up to maxRateLimitWaits times. Other errors are returned as they
// are.
func (w *waited) retryLimited(ctx context.Context, what string, ask func() error) error {
	for tries := 0; ; tries++ {
		err := ask()
		var limited *slack.RateLimitedError
		if !errors.As(err, &limited) || tries == maxRateLimitWaits {
			return err
		}
		wait := max(limited.RetryAfter, time.Second)
		tool.NoticeWait(ctx, fmt.Sprintf("Slack rate-limited %s; waiting %s, as its Retry-After asked", what, wait))
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (while waiting out Slack's rate limit)", ctx.Err())
		case <-t.C:
		}
		w.n++
		w.total += wait
	}
}

// note says how long the question waited on rate limits, if it did.
func (w *waited) note() string {
	if w.n == 0 {
		return ""
	}
	return fmt.Sprintf("; Slack rate-limited the question %d time(s), and it waited %s in all", w.n, w.total)
}
