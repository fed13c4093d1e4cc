package sandbox

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Identities the Slack fake reports for its one workspace and bot.
const (
	slackTeam   = "capstan-sandbox"
	slackTeamID = "T0SANDBOX"
	slackUser   = "capstan"
	slackUserID = "U0SANDBOX"
	slackBotID  = "B0SANDBOX"
)

// Slack is a fake Slack Web API serving the methods capstan uses, under
// /api/<method> as slack-go calls them: auth.test, chat.postMessage,
// conversations.list and conversations.history. It starts with one
// channel, SlackGeneral. Every method needs a token
// (form field "token" or an Authorization: Bearer header) but any non-empty
// token is accepted: a SandboxUserToken(name) is the human user name's (user
// id "U"+NAME, no bot id), any other token the sandbox's bot's (user
// U0SANDBOX, bot B0SANDBOX). auth.test answers who the token is, and every
// message records who posted it, its text as Slack would receive it
// (escapes included) and whether it was posted with mrkdwn=false.
//
// Channels are as in Slack: chat.postMessage takes a channel's name (with or
// without "#"; a new name makes a channel on first touch) or its id, and
// answers the id; conversations.list pages the channels with cursors;
// conversations.history takes only an id and answers channel_not_found to a
// name. LimitHistory (or POST /_sandbox/limits) makes conversations.history
// as strict as Slack is with apps outside its Marketplace: one request per
// interval (429 ratelimited with Retry-After for the rest) and a smaller
// largest page. GET /_sandbox/stats returns [SlackStats]; /_sandbox/faults
// and AddFault take [FaultRule]s naming those methods. Kinds: fail, drop,
// delay, rate_limit (429 with Retry-After and error "ratelimited"), and lag
// on conversations.history, which then leaves out messages posted less than
// the lag ago. It is safe for concurrent use.
type Slack struct {
	faultPoint
	faultRules
	control map[string]http.HandlerFunc // the /_sandbox/ endpoints
	methods map[string]slackMethod      // the API, by method name

	mu       sync.Mutex
	now      func() time.Time // message timestamps follow it
	stats    SlackStats
	channels map[string][]slackStored // by channel id
	ids      map[string]string        // channel name (without "#") -> id
	names    []string                 // channel names, in creation order
	lastTS   int64                    // microseconds since the epoch of the newest message
	limit    HistoryLimit
	lastRead time.Time // when conversations.history last answered under limit
}

// SlackStats counts what the Slack fake has done.
type SlackStats struct {
	// Requests is the number of /api/ requests the fake handled. A request
	// a fault answered in the fake's place (a refusal, or a SetFault fault
	// that answers) is not counted; one the fault let through is.
	Requests int64 `json:"requests"`
	// MessagesPosted is the number of messages chat.postMessage stored.
	MessagesPosted int64 `json:"messages_posted"`
}

// SlackMessage is a message as the fake stored it.
type SlackMessage struct {
	// Text is the text as chat.postMessage took it, Slack's escapes
	// (&amp; &lt; &gt;) included: what Slack would parse.
	Text string `json:"text"`
	// Plain is set when the message was posted with mrkdwn=false: Slack
	// shows its text as it is, with no formatting.
	Plain bool   `json:"plain,omitempty"`
	TS    string `json:"ts"`
	// User and BotID are who posted it: the token's user, and its bot's id
	// for a bot token (empty for a user token).
	User  string `json:"user"`
	BotID string `json:"bot_id,omitempty"`
	// Metadata is the zero value when the message was posted without any.
	Metadata SlackMessageMetadata `json:"metadata"`
}

// SlackMessageMetadata is a message's metadata, as chat.postMessage took it.
type SlackMessageMetadata struct {
	EventType string `json:"event_type"`
	// EventPayload is a private copy: changing it changes nothing stored.
	EventPayload map[string]any `json:"event_payload,omitempty"`
}

// slackStored is a stored message. The payload is kept as JSON so every
// reader decodes a private copy.
type slackStored struct {
	text      string
	plain     bool   // posted with mrkdwn=false
	userID    string // who posted it
	botID     string // the poster's bot, empty for a user token
	ts        int64
	eventType string
	payload   json.RawMessage
}

// slackMethod serves one API method: it returns the JSON answer.
type slackMethod func(r *http.Request, a slackArgs) any

// NewSlack returns a Slack fake with no messages and no fault.
func NewSlack() *Slack {
	s := &Slack{channels: map[string][]slackStored{}, ids: map[string]string{}, now: time.Now}
	s.methods = map[string]slackMethod{
		"auth.test":             s.authTest,
		"chat.postMessage":      s.postMessage,
		"conversations.history": s.history,
		"conversations.list":    s.list,
	}
	s.initFaultRules(faultDialect{
		endpoints: slices.Sorted(maps.Keys(s.methods)),
		lagging:   []string{"conversations.history"},
		kinds:     []FaultKind{FaultFail, FaultDrop, FaultDelay, FaultLag, FaultRateLimit},
		check:     checkSlackRefusal,
		refuse:    refuseSlack,
	})
	s.control = map[string]http.HandlerFunc{"stats": statsHandler(s.Stats), "faults": s.serveControl, "limits": s.serveLimits}
	s.channelLocked(SlackGeneral, true) // every workspace has one; its id is SlackGeneralID
	return s
}

// Stats returns a snapshot of the counters.
func (s *Slack) Stats() SlackStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// Messages returns the messages posted to channel (its name, with or without
// "#", or its id), oldest first.
func (s *Slack) Messages(channel string) []SlackMessage {
	s.mu.Lock()
	id, _ := s.channelLocked(channel, false)
	stored := slices.Clone(s.channels[id])
	s.mu.Unlock()
	out := make([]SlackMessage, 0, len(stored))
	for _, m := range stored {
		msg := SlackMessage{Text: m.text, Plain: m.plain, TS: formatTS(m.ts), User: m.userID, BotID: m.botID}
		msg.Metadata.EventType = m.eventType
		if len(m.payload) > 0 {
			_ = json.Unmarshal(m.payload, &msg.Metadata.EventPayload)
		}
		out = append(out, msg)
	}
	return out
}

// ServeHTTP implements [http.Handler]. The installed fault, if any, runs
// before anything is read or counted, then the fault rule for the method, if
// any. Like Slack, the fake answers API errors with status 200 and
// {"ok": false, "error": ...}.
func (s *Slack) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serveFake(w, r, &s.faultPoint, s.control, http.HandlerFunc(s.serve))
}

func (s *Slack) serve(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if !ok {
		http.NotFound(w, r)
		return
	}
	s.serveEndpoint(name, w, r, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.call(name, w, r)
	}))
}

// call counts the request and runs the method name.
func (s *Slack) call(name string, w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	s.stats.Requests++
	s.mu.Unlock()

	method := s.methods[name]
	if method == nil {
		writeJSONBody(w, http.StatusOK, slackError("unknown_method"))
		return
	}
	args, err := readSlackArgs(w, r)
	if err != nil {
		writeJSONBody(w, http.StatusOK, slackError("invalid_form_data"))
		return
	}
	if args.token == "" {
		writeJSONBody(w, http.StatusOK, slackError("not_authed"))
		return
	}
	if name == "conversations.history" {
		if wait := s.historyWait(); wait > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(wait), 10))
			writeJSONBody(w, http.StatusTooManyRequests, slackError("ratelimited"))
			return
		}
	}
	writeJSONBody(w, http.StatusOK, method(r, args))
}

// checkSlackRefusal checks the status of a Slack rate limit, which is always
// 429.
func checkSlackRefusal(rule *FaultRule) error {
	if rule.Status != 0 && rule.Status != http.StatusTooManyRequests {
		return errors.New("a Slack rate limit is always status 429")
	}
	rule.Status = http.StatusTooManyRequests
	return nil
}

// refuseSlack answers as Slack does when it will not act: a rate limit is
// 429 with Retry-After and error "ratelimited"; a server error is a page,
// not JSON.
func refuseSlack(w http.ResponseWriter, rule FaultRule) {
	if rule.Kind == FaultRateLimit {
		w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(rule.RetryAfter), 10))
		writeJSONBody(w, http.StatusTooManyRequests, slackError("ratelimited"))
		return
	}
	http.Error(w, http.StatusText(rule.Status), rule.Status)
}

func (s *Slack) authTest(_ *http.Request, a slackArgs) any {
	user, userID, botID := slackWho(a.token)
	out := map[string]any{
		"ok":      true,
		"url":     "https://" + slackTeam + ".slack.com/",
		"team":    slackTeam,
		"user":    user,
		"team_id": slackTeamID,
		"user_id": userID,
	}
	if botID != "" {
		out["bot_id"] = botID
	}
	return out
}

func (s *Slack) postMessage(_ *http.Request, a slackArgs) any {
	channel := a.get("channel")
	if channel == "" {
		return slackError("channel_not_found")
	}
	text := a.get("text")
	if text == "" && a.get("blocks") == "" && a.get("attachments") == "" {
		return slackError("no_text")
	}
	_, userID, botID := slackWho(a.token)
	msg := slackStored{text: text, plain: a.get("mrkdwn") == "false", userID: userID, botID: botID}
	if raw := a.get("metadata"); raw != "" {
		var md struct {
			EventType    string          `json:"event_type"`
			EventPayload json.RawMessage `json:"event_payload"`
		}
		if err := json.Unmarshal([]byte(raw), &md); err != nil {
			return slackError("invalid_metadata_format")
		}
		if md.EventType == "" {
			return slackError("invalid_metadata_schema")
		}
		msg.eventType, msg.payload = md.EventType, md.EventPayload
	}

	s.mu.Lock()
	id, ok := s.channelLocked(channel, true)
	if !ok {
		s.mu.Unlock()
		return slackError("channel_not_found")
	}
	// Timestamps follow the wall clock, so a reconciler's "oldest = claim
	// time minus a margin" finds the message, and strictly increase, so
	// each one names one message.
	msg.ts = max(s.now().UnixMicro(), s.lastTS+1)
	s.lastTS = msg.ts
	s.channels[id] = append(s.channels[id], msg)
	s.stats.MessagesPosted++
	s.mu.Unlock()

	return map[string]any{
		"ok":      true,
		"channel": id,
		"ts":      formatTS(msg.ts),
		"message": msg.toJSON(true),
	}
}

// historyPageMax is the largest page conversations.history returns, as in
// Slack; the default page is 100.
const historyPageMax = 999

// history serves conversations.history. Under a FaultLag it leaves out the
// messages posted less than the lag ago, as a lagging replica would.
func (s *Slack) history(r *http.Request, a slackArgs) any {
	channel := a.get("channel")
	if channel == "" {
		return slackError("channel_not_found")
	}
	oldest, okOld := parseTS(a.get("oldest"), 0)
	latest, okNew := parseTS(a.get("latest"), 1<<62)
	if !okOld || !okNew {
		return slackError("invalid_ts_oldest")
	}
	s.mu.Lock()
	pageMax := cmp.Or(s.limit.PageMax, historyPageMax)
	stored, known := s.channels[channel] // by id only, as in Slack
	stored = slices.Clone(stored)
	now := s.now()
	s.mu.Unlock()
	if !known {
		return slackError("channel_not_found")
	}
	limit, offset, errCode := slackPage(a, min(100, pageMax), pageMax)
	if errCode != "" {
		return slackError(errCode)
	}
	inclusive, withMeta := a.flag("inclusive"), a.flag("include_all_metadata")
	visible := int64(1 << 62) // the newest ts this read can see
	if cutoff, lagging := lagCutoff(r, now); lagging {
		visible = cutoff.UnixMicro()
	}

	// Newest first, as Slack returns them.
	var matched []slackStored
	for _, m := range slices.Backward(stored) {
		if m.ts > visible {
			continue
		}
		if m.ts > oldest && m.ts < latest || inclusive && (m.ts == oldest || m.ts == latest) {
			matched = append(matched, m)
		}
	}
	page := matched[min(offset, len(matched)):]
	hasMore := len(page) > limit
	page = page[:min(limit, len(page))]
	msgs := make([]map[string]any, 0, len(page))
	for _, m := range page {
		msgs = append(msgs, m.toJSON(withMeta))
	}
	next := ""
	if hasMore {
		next = fmt.Sprintf("offset:%d", offset+limit)
	}
	return map[string]any{
		"ok":                true,
		"messages":          msgs,
		"has_more":          hasMore,
		"pin_count":         0,
		"response_metadata": map[string]any{"next_cursor": next},
	}
}

// toJSON renders m as a Slack message object.
func (m slackStored) toJSON(withMeta bool) map[string]any {
	out := map[string]any{
		"type": "message",
		"user": m.userID,
		"text": m.text,
		"ts":   formatTS(m.ts),
	}
	if m.botID != "" {
		out["bot_id"] = m.botID
	}
	if withMeta && m.eventType != "" {
		md := map[string]any{"event_type": m.eventType}
		if len(m.payload) > 0 {
			md["event_payload"] = m.payload
		}
		out["metadata"] = md
	}
	return out
}

func slackError(code string) map[string]any {
	return map[string]any{"ok": false, "error": code}
}

// formatTS renders microseconds since the epoch as a Slack ts
// ("1700000000.000100").
func formatTS(us int64) string {
	return fmt.Sprintf("%d.%06d", us/1e6, us%1e6)
}

// parseTS parses a Slack ts (seconds with up to six decimals) into
// microseconds; empty means def.
func parseTS(s string, def int64) (int64, bool) {
	if s == "" {
		return def, true
	}
	sec, frac, _ := strings.Cut(s, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil || n < 0 || len(frac) > 6 {
		return 0, false
	}
	us := int64(0)
	if frac != "" {
		f, err := strconv.ParseInt(frac+strings.Repeat("0", 6-len(frac)), 10, 64)
		if err != nil || f < 0 {
			return 0, false
		}
		us = f
	}
	return n*1e6 + us, true
}

// slackArgs holds a method's arguments, read from the query string and a
// form-encoded or JSON body, and its token.
type slackArgs struct {
	values map[string]string
	token  string
}

func (a slackArgs) get(key string) string { return a.values[key] }

// flag reports a boolean argument the way Slack reads one: "1" or "true".
func (a slackArgs) flag(key string) bool {
	v := a.values[key]
	return v == "1" || v == "true"
}

// readSlackArgs reads arguments as slack-go sends them: a form body (or query
// string) with the token as a field, or a JSON body with the token in the
// Authorization header. In a JSON body, a non-string value (a number, a
// boolean, the metadata object) is kept as its JSON text, which is the form
// the same argument has in a form body.
func readSlackArgs(w http.ResponseWriter, r *http.Request) (slackArgs, error) {
	a := slackArgs{values: map[string]string{}}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "application/json" {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFakeRequestBytes))
		if err != nil {
			return a, err
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body, &fields); err != nil {
			return a, err
		}
		for k, raw := range fields {
			var str string
			if json.Unmarshal(raw, &str) == nil {
				a.values[k] = str
			} else {
				a.values[k] = string(raw)
			}
		}
		for k, v := range r.URL.Query() {
			if _, ok := a.values[k]; !ok && len(v) > 0 {
				a.values[k] = v[0]
			}
		}
	} else {
		r.Body = http.MaxBytesReader(w, r.Body, maxFakeRequestBytes)
		if err := r.ParseForm(); err != nil {
			return a, err
		}
		for k := range r.Form {
			a.values[k] = r.Form.Get(k)
		}
	}
	a.token = a.values["token"]
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && bearer != "" {
		a.token = bearer
	}
	return a, nil
}
