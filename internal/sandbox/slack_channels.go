package sandbox

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The Slack fake's channels (names, ids, conversations.list), who a token
// is, and how strict conversations.history is.

// HistoryLimit is how strict conversations.history is (LimitHistory). The
// zero value sets no limit.
type HistoryLimit struct {
	// Every is the least time between two answered requests; a request
	// sooner is refused with 429 and the Retry-After left. Zero: no limit.
	Every time.Duration `json:"every"`
	// PageMax is the largest page; zero keeps the fake's usual maximum.
	PageMax int `json:"page_max"`
}

// SlackGeneral is the channel every Slack fake starts with, and
// SlackGeneralID its id.
const (
	SlackGeneral   = "general"
	SlackGeneralID = "C00000001"
)

// LimitHistory makes conversations.history answer at most one request per
// l.Every and at most l.PageMax messages a page, as Slack does for apps
// outside its Marketplace (a minute, 15). The zero HistoryLimit lifts it.
func (s *Slack) LimitHistory(l HistoryLimit) {
	s.mu.Lock()
	s.limit, s.lastRead = l, time.Time{}
	s.mu.Unlock()
}

// serveLimits is /_sandbox/limits: POST a HistoryLimit ({"every": ns,
// "page_max": n}) to set it; GET shows it.
func (s *Slack) serveLimits(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var l HistoryLimit
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxFakeRequestBytes)).Decode(&l); err != nil || l.Every < 0 || l.PageMax < 0 {
			http.Error(w, "want a JSON HistoryLimit with no negative field", http.StatusBadRequest)
			return
		}
		s.LimitHistory(l)
	}
	s.mu.Lock()
	l := s.limit
	s.mu.Unlock()
	writeJSONBody(w, http.StatusOK, l)
}

// ChannelID returns the id of the channel named name (with or without "#"),
// or name itself when it is an id; "" when there is no such channel.
func (s *Slack) ChannelID(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, _ := s.channelLocked(name, false)
	return id
}

// channelLocked finds a channel by name (with or without "#") or id; with
// create, a new name makes a channel. The caller holds mu.
func (s *Slack) channelLocked(channel string, create bool) (string, bool) {
	if _, ok := s.channels[channel]; ok {
		return channel, true
	}
	name := strings.TrimPrefix(channel, "#")
	if id, ok := s.ids[name]; ok {
		return id, true
	}
	if !create || name == "" || slackLooksLikeID(channel) {
		return "", false
	}
	id := fmt.Sprintf("C%08d", len(s.names)+1)
	s.ids[name], s.names, s.channels[id] = id, append(s.names, name), nil
	return id, true
}

// slackLooksLikeID reports whether s has the form of a conversation id
// (C…, G…, D…; upper-case letters and digits): Slack names are lower-case.
func slackLooksLikeID(s string) bool {
	if len(s) < 2 || !strings.ContainsRune("CGD", rune(s[0])) {
		return false
	}
	return strings.Trim(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == ""
}

// slackWho is the user and bot a token acts as.
func slackWho(token string) (user, userID, botID string) {
	if name, ok := strings.CutPrefix(token, sandboxUserPrefix); ok && name != "" {
		return name, "U" + strings.ToUpper(name), ""
	}
	return slackUser, slackUserID, slackBotID
}

// historyWait is how long a conversations.history request must still wait
// under the HistoryLimit; zero lets it through and starts a new interval.
func (s *Slack) historyWait() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.limit.Every <= 0 {
		return 0
	}
	now := s.now()
	if wait := s.lastRead.Add(s.limit.Every).Sub(now); !s.lastRead.IsZero() && wait > 0 {
		return wait
	}
	s.lastRead = now
	return 0
}

// conversationsListMax is the largest page conversations.list returns, as
// in Slack; the default page is 100.
const conversationsListMax = 1000

// list serves conversations.list: every channel (none is archived or
// private), in creation order, paged with cursors.
func (s *Slack) list(_ *http.Request, a slackArgs) any {
	limit, offset, errCode := slackPage(a, 100, conversationsListMax)
	if errCode != "" {
		return slackError(errCode)
	}
	s.mu.Lock()
	names := slices.Clone(s.names)
	ids := maps.Clone(s.ids)
	s.mu.Unlock()
	page := names[min(offset, len(names)):]
	hasMore := len(page) > limit
	page = page[:min(limit, len(page))]
	chans := make([]map[string]any, 0, len(page))
	for _, name := range page {
		chans = append(chans, map[string]any{"id": ids[name], "name": name, "is_channel": true, "is_private": false,
			"is_archived": false, "is_member": true, "name_normalized": name})
	}
	next := ""
	if hasMore {
		next = fmt.Sprintf("offset:%d", offset+limit)
	}
	return map[string]any{"ok": true, "channels": chans, "response_metadata": map[string]any{"next_cursor": next}}
}

// slackPage reads limit (default def, at most max) and an "offset:N" cursor,
// or names the error Slack would answer.
func slackPage(a slackArgs, def, most int) (limit, offset int, errCode string) {
	limit = def
	if v := a.get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, 0, "invalid_limit"
		}
		if n > 0 {
			limit = min(n, most)
		}
	}
	if c := a.get("cursor"); c != "" {
		n, err := strconv.Atoi(strings.TrimPrefix(c, "offset:"))
		if err != nil || n < 0 || !strings.HasPrefix(c, "offset:") {
			return 0, 0, "invalid_cursor"
		}
		offset = n
	}
	return limit, offset, ""
}
