package slackpost

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
)

// sharedFor is how long a finished read of a channel's history goes on
// answering, with what it saw, the questions asked after it.
const sharedFor = 2 * time.Second

// historyReads shares the reads of each channel's history among the
// questions a worker asks about it (issue 18: Slack limits
// conversations.history per app, so one read per channel serves every
// pending check there). A question is answered by a read that
// covers its messages (began no later in the channel's history) and
//
//   - began after the question was asked: whatever it saw or did not see
//     answers the question, as a read of its own would have; or
//   - began before, but is in flight or finished within sharedFor, and
//     shows the operation's message: a message seen is found, however
//     early the read; but not seeing it, an earlier read cannot say, so
//     the question waits for a read that begins after it.
//
// Questions that arrive while a read is in flight thus wait for it and,
// when it does not show their message, share the one read that begins
// next. A read that fails answers only the question that began it.
type historyReads struct {
	now  func() time.Time
	mu   sync.Mutex
	last map[string]*historyRead // channel id -> its newest read
}

// historyRead is one read of a channel's history, from oldest on.
type historyRead struct {
	started, oldest time.Time
	done            chan struct{} // closed when the fields below are set
	finished        time.Time
	msgs            []slack.Message
	note            string // the rate-limit waits, as waited.note says them
	err             error
}

// fetchFunc reads a channel's history from oldest on.
type fetchFunc func(ctx context.Context, oldest time.Time) ([]slack.Message, string, error)

// read returns a read of channel id's history from oldest on that answers
// a question asked now, by sharing one (see historyReads) or by fetching
// one; shows says whether a read's messages show what the question looks
// for.
func (h *historyReads) read(ctx context.Context, id string, oldest time.Time, shows func([]slack.Message) bool, fetch fetchFunc) (*historyRead, error) {
	asked := h.now()
	var tried *historyRead
	for {
		h.mu.Lock()
		r := h.last[id]
		if r == nil || r == tried || r.oldest.After(oldest) || !r.fresh(h.now()) {
			r = &historyRead{started: h.now(), oldest: oldest, done: make(chan struct{})}
			if h.last == nil {
				h.last = map[string]*historyRead{}
			}
			h.last[id] = r
			h.mu.Unlock()
			r.msgs, r.note, r.err = fetch(ctx, oldest)
			r.finished = h.now()
			close(r.done)
			return r, r.err
		}
		h.mu.Unlock()
		select {
		case <-r.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if r.err == nil && (!r.started.Before(asked) || shows(r.msgs)) {
			return r, nil
		}
		tried = r // it failed, or began before the question and does not show its message
	}
}

// fresh reports whether r may still be shared at now: in flight, or
// finished within sharedFor.
func (r *historyRead) fresh(now time.Time) bool {
	select {
	case <-r.done:
		return now.Sub(r.finished) < sharedFor
	default:
		return true
	}
}

// slackTime parses a message's timestamp ("1700000000.000100").
func slackTime(ts string) (time.Time, bool) {
	sec, frac, _ := strings.Cut(ts, ".")
	s, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	var us int64
	if frac != "" {
		frac = (frac + "000000")[:6]
		if us, err = strconv.ParseInt(frac, 10, 64); err != nil {
			return time.Time{}, false
		}
	}
	return time.Unix(s, us*1000), true
}
