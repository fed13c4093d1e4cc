// Package livestream carries the text of a model attempt from the worker that
// streams it to the people following the task (`starter follow`), within a
// moment of the model sending it (docs/design.md §9.3).
//
// Each worker holds a Hub: ModelTurn publishes every text delta of its
// attempt to it, and the Hub serves each attempt over HTTP as server-sent
// events, from any byte offset, so a follower that arrives late or
// reconnects gets the text exactly once. The text is speculative: the hub
// never says whether an attempt committed — the workflow does — and it keeps
// an attempt nobody reads only for a while after its last change (Retain).
//
// The endpoint is guarded: a token (or, without one, loopback clients
// only), a cap on connections, a deadline on every write, and no memory
// spent on an attempt only a follower named (http.go, serve.go).
package livestream

import (
	"log/slog"
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
//
// Only the worker's own attempts (Begin, Publish, End) make entries; a
// follower that asks for an attempt the hub has not heard of waits for it
// on added, holding nothing in the map, so followers cannot grow the hub.
type Hub struct {
	mu       sync.Mutex
	attempts map[string]*attempt
	// added is closed and replaced whenever an attempt is added, waking
	// the followers that wait for one.
	added chan struct{}
	url   string

	now          func() time.Time
	retain       time.Duration
	maxBytes     int
	token        string
	maxConns     int
	writeTimeout time.Duration
	sweepEvery   time.Duration
	ticks        <-chan time.Time
	logger       *slog.Logger
}

// attempt is one attempt's text so far. changed is closed and replaced on
// every change, waking the subscribers; listeners counts them, and an
// attempt someone listens to is never swept.
type attempt struct {
	text      []byte
	truncated bool
	ended     bool
	outcome   string
	updated   time.Time
	changed   chan struct{}
	listeners int
}

// Options configure a Hub; zero fields take the defaults of
// internal/config (DefaultStream*).
type Options struct {
	// URL is where followers reach this hub (CAPSTAN_STREAM_URL), put in
	// each attempt's heartbeat details.
	URL string
	// Retain is how long an attempt nobody reads is kept after its last
	// change; MaxBytes bounds the text kept of one attempt.
	Retain   time.Duration
	MaxBytes int
	// Token (CAPSTAN_STREAM_TOKEN) is the bearer token every client must
	// present; empty serves loopback clients only.
	Token string
	// MaxConns (CAPSTAN_STREAM_MAX_CONNS) caps the connections Serve holds
	// at once; WriteTimeout (CAPSTAN_STREAM_WRITE_TIMEOUT) bounds every
	// write to a follower.
	MaxConns     int
	WriteTimeout time.Duration
	// SweepEvery is the period of the sweep Serve runs. Ticks, when set,
	// replaces its ticker (tests).
	SweepEvery time.Duration
	Ticks      <-chan time.Time
	// Now is the clock of Retain.
	Now func() time.Time
	// Logger receives a line for each follower cut for not reading; nil
	// discards them.
	Logger *slog.Logger
}

// NewHub returns an empty hub.
func NewHub(o Options) *Hub {
	h := &Hub{
		attempts: map[string]*attempt{}, added: make(chan struct{}), url: o.URL,
		now: o.Now, retain: o.Retain, maxBytes: o.MaxBytes, token: o.Token,
		maxConns: o.MaxConns, writeTimeout: o.WriteTimeout, sweepEvery: o.SweepEvery, ticks: o.Ticks, logger: o.Logger,
	}
	if h.now == nil {
		h.now = time.Now
	}
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	orDefault(&h.retain, config.DefaultStreamRetain)
	orDefault(&h.maxBytes, config.DefaultStreamMaxBytes)
	orDefault(&h.maxConns, config.DefaultStreamMaxConns)
	orDefault(&h.writeTimeout, config.DefaultStreamWriteTimeout)
	orDefault(&h.sweepEvery, config.DefaultStreamSweepEvery)
	return h
}

func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
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

// get returns the attempt, creating it; h.mu is held. Only the worker's
// side (Begin, Publish, End) calls it.
func (h *Hub) get(id string) *attempt {
	a, ok := h.attempts[id]
	if !ok {
		a = &attempt{changed: make(chan struct{}), updated: h.now()}
		h.attempts[id] = a
		close(h.added)
		h.added = make(chan struct{})
	}
	return a
}

// listen registers a follower of the attempt and returns it; when the hub
// has not heard of it, it returns nil and the channel closed at the next
// attempt added. A follower that got an attempt calls unlisten when it
// leaves.
func (h *Hub) listen(id string) (*attempt, <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	a, ok := h.attempts[id]
	if !ok {
		return nil, h.added
	}
	a.listeners++
	return a, nil
}

func (h *Hub) unlisten(a *attempt) {
	h.mu.Lock()
	a.listeners--
	h.mu.Unlock()
}

// knows reports whether the hub has heard of the attempt.
func (h *Hub) knows(id string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.attempts[id]
	return ok
}

// touch wakes a's subscribers; h.mu is held.
func (h *Hub) touch(a *attempt) {
	a.updated = h.now()
	close(a.changed)
	a.changed = make(chan struct{})
}

// sweep forgets the attempts nobody reads whose last change is older than
// Retain.
func (h *Hub) sweep() {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	for id, a := range h.attempts {
		if a.listeners == 0 && now.Sub(a.updated) > h.retain {
			delete(h.attempts, id)
		}
	}
}

// sweepUntil sweeps on every tick of the hub's timer until done is closed.
func (h *Hub) sweepUntil(done <-chan struct{}) {
	ticks := h.ticks
	if ticks == nil {
		t := time.NewTicker(h.sweepEvery)
		defer t.Stop()
		ticks = t.C
	}
	for {
		select {
		case <-ticks:
			h.sweep()
		case <-done:
			return
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

// snapshot returns a's text from offset on and its state, with the channel
// that is closed at its next change.
func (h *Hub) snapshot(a *attempt, from int) (text []byte, next int, st attempt, changed <-chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	from = min(max(from, 0), len(a.text))
	text = append([]byte(nil), a.text[from:]...)
	return text, len(a.text), attempt{truncated: a.truncated, ended: a.ended, outcome: a.outcome}, a.changed
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
