// Package livestream carries the text of a model attempt from the worker that
// streams it to the people following the task (`starter follow`), within a
// moment of the model sending it (docs/design.md §9.3).
//
// Each worker holds a Hub: ModelTurn publishes every text delta of its
// attempt to it, and the Hub serves each attempt over HTTP as server-sent
// events, from any byte offset, so a follower that arrives late or
// reconnects gets the text exactly once. The text is speculative: the hub
// never says whether an attempt committed — the workflow does — and it keeps
// an attempt only for a while after its last change (Retain).
package livestream

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/config"
)

const (
	// keepAlive is the interval of SSE comments on an idle stream, so
	// proxies and the follower's client see the connection alive.
	keepAlive = 15 * time.Second
	// Path serves one attempt: GET Path?attempt=ID&from=OFFSET.
	Path = "/v1/attempts"
)

// Hub holds the text of the attempts streaming on one worker. Its methods
// are safe for concurrent use; the zero value is not usable: use NewHub.
type Hub struct {
	mu       sync.Mutex
	attempts map[string]*attempt
	now      func() time.Time
	retain   time.Duration
	maxBytes int
	swept    time.Time
	url      string
}

// attempt is one attempt's text so far. changed is closed and replaced on
// every change, waking the subscribers.
type attempt struct {
	text      []byte
	truncated bool
	ended     bool
	outcome   string
	updated   time.Time
	changed   chan struct{}
}

// Options configure a Hub; zero fields take the defaults.
type Options struct {
	// URL is where followers reach this hub (CAPSTAN_STREAM_URL), put in
	// each attempt's heartbeat details.
	URL      string
	Retain   time.Duration
	MaxBytes int
	Now      func() time.Time
}

// NewHub returns an empty hub.
func NewHub(o Options) *Hub {
	h := &Hub{attempts: map[string]*attempt{}, now: o.Now, retain: o.Retain, maxBytes: o.MaxBytes, url: o.URL}
	if h.now == nil {
		h.now = time.Now
	}
	if h.retain <= 0 {
		h.retain = config.DefaultLiveRetain
	}
	if h.maxBytes <= 0 {
		h.maxBytes = config.DefaultLiveMaxBytes
	}
	return h
}

// URL is where followers subscribe to this hub's attempts.
func (h *Hub) URL() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.url
}

// SetURL sets the advertised URL, once the listener's port is known.
func (h *Hub) SetURL(u string) {
	h.mu.Lock()
	h.url = u
	h.mu.Unlock()
}

// get returns the attempt, creating it; h.mu is held.
func (h *Hub) get(id string) *attempt {
	a, ok := h.attempts[id]
	if !ok {
		a = &attempt{changed: make(chan struct{}), updated: h.now()}
		h.attempts[id] = a
	}
	return a
}

// knows reports whether the hub has heard of the attempt.
func (h *Hub) knows(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.attempts[id]
	return ok
}

// touch wakes a's subscribers and sweeps old attempts; h.mu is held.
func (h *Hub) touch(a *attempt) {
	now := h.now()
	a.updated = now
	close(a.changed)
	a.changed = make(chan struct{})
	if now.Sub(h.swept) < time.Minute {
		return
	}
	h.swept = now
	for id, old := range h.attempts {
		if now.Sub(old.updated) > h.retain {
			delete(h.attempts, id)
		}
	}
}

// Begin starts the attempt's stream, afresh if an attempt of that id ended
// here before (a workflow reset runs an unsettled attempt again), and
// returns the URL where followers read it.
func (h *Hub) Begin(attemptID string) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a, ok := h.attempts[attemptID]; ok && a.ended {
		close(a.changed) // its subscribers see it ended; new ones get the new run
		delete(h.attempts, attemptID)
	}
	h.get(attemptID)
	return h.url
}

// Publish appends text to the attempt's stream.
func (h *Hub) Publish(attemptID, text string) {
	if text == "" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.get(attemptID)
	if a.ended || a.truncated {
		return
	}
	if room := h.maxBytes - len(a.text); len(text) > room {
		text, a.truncated = text[:max(room, 0)], true
	}
	a.text = append(a.text, text...)
	h.touch(a)
}

// End marks the attempt's stream over; outcome is how the worker saw it end
// (a model.Outcome). Whether it committed is the workflow's to say.
func (h *Hub) End(attemptID, outcome string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.get(attemptID)
	if a.ended {
		return
	}
	a.ended, a.outcome = true, outcome
	h.touch(a)
}

// snapshot returns the attempt's text from offset on and whether it ended,
// with the channel that is closed at its next change.
func (h *Hub) snapshot(id string, from int) (text []byte, next int, a attempt, changed <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	at := h.get(id)
	from = min(max(from, 0), len(at.text))
	text = append([]byte(nil), at.text[from:]...)
	return text, len(at.text), attempt{truncated: at.truncated, ended: at.ended, outcome: at.outcome}, at.changed
}

// Event is one server-sent event of an attempt's stream.
type Event struct {
	// Text is the text from byte offset From on; Next is the offset after it.
	Text string `json:"text,omitempty"`
	From int    `json:"from"`
	Next int    `json:"next"`
	// Truncated: the hub kept no more of this attempt's text.
	Truncated bool `json:"truncated,omitempty"`
	// End: the stream is over, Outcome says how the worker saw it end.
	End     bool   `json:"end,omitempty"`
	Outcome string `json:"outcome,omitempty"`
}

// ServeHTTP serves GET Path?attempt=ID&from=OFFSET: the attempt's text from
// OFFSET (bytes) as "text" events as it grows, then one "end" event. An
// attempt the hub has not heard of yet is waited for: a follower may ask
// before the model's first byte; with known=1 it is 404 instead (a
// follower looking for an attempt that ran between two of its polls).
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != Path {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, "use GET", http.StatusMethodNotAllowed)
		return
	}
	id := r.URL.Query().Get("attempt")
	from, err := strconv.Atoi(r.URL.Query().Get("from"))
	if id == "" || (r.URL.Query().Has("from") && (err != nil || from < 0)) {
		http.Error(w, "want ?attempt=ID[&from=BYTE_OFFSET]", http.StatusBadRequest)
		return
	}
	if r.URL.Query().Get("known") == "1" && !h.knows(id) {
		http.Error(w, "this hub has no attempt "+id, http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	send := func(kind string, ev Event) bool {
		data, _ := json.Marshal(ev)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", kind, data); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if rc.Flush() != nil {
		return
	}
	ka := time.NewTicker(keepAlive)
	defer ka.Stop()
	for {
		text, next, st, changed := h.snapshot(id, from)
		if len(text) > 0 {
			if !send("text", Event{Text: string(text), From: from, Next: next, Truncated: st.truncated}) {
				return
			}
			from = next
		}
		if st.ended {
			send("end", Event{From: from, Next: from, End: true, Outcome: st.outcome, Truncated: st.truncated})
			return
		}
		select {
		case <-changed:
		case <-ka.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}
