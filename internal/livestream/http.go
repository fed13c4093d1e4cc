package livestream

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// ServeHTTP serves GET Path?attempt=ID&from=OFFSET: the attempt's text from
// OFFSET (bytes) as "text" events as it grows, then one "end" event. An
// attempt the hub has not heard of yet is waited for: a follower may ask
// before the model's first byte; with known=1 it is 404 instead (a
// follower looking for an attempt that ran between two of its polls).
//
// A client must present the hub's token (Authorization: Bearer), or, when
// the hub has none, connect from loopback and name a loopback Host. Every write has a deadline
// (WriteTimeout): a follower that stops reading is cut, not waited for.
func (h *Hub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if status, msg := h.authorize(r); status != 0 {
		if status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="capstan live stream"`)
		}
		http.Error(w, msg, status)
		return
	}
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
	s := &stream{h: h, w: w, rc: http.NewResponseController(w), id: id, remote: r.RemoteAddr}
	// The server's last write of the response, after this returns, gets a
	// deadline too; the connection is not kept alive, so no later response
	// inherits it.
	defer s.rc.SetWriteDeadline(time.Now().Add(h.writeTimeout)) //nolint:errcheck // as every write's
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusOK)
	if !s.flush() {
		return
	}
	ka := time.NewTicker(keepAlive)
	defer ka.Stop()
	a := s.await(r, ka.C)
	if a == nil {
		return
	}
	defer h.unlisten(a)
	for {
		text, next, st, changed := h.snapshot(a, from)
		for len(text) > 0 {
			n := eventSize(text)
			if !s.send("text", Event{Text: string(text[:n]), From: from, Next: from + n, Truncated: st.truncated && from+n == next}) {
				return
			}
			text, from = text[n:], from+n
		}
		if st.ended {
			s.send("end", Event{From: from, Next: from, End: true, Outcome: st.outcome, Truncated: st.truncated})
			return
		}
		select {
		case <-changed:
		case <-ka.C:
			if !s.keepAlive() {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// maxEvent bounds the text of one event, so that each write's deadline
// bounds a follower's progress, not the size of what it catches up on.
const maxEvent = 32 << 10

// eventSize is how much of text the next event carries: at most maxEvent
// bytes, ending at a character's boundary.
func eventSize(text []byte) int {
	if len(text) <= maxEvent {
		return len(text)
	}
	n := maxEvent
	for n > maxEvent-utf8.UTFMax && !utf8.RuneStart(text[n]) {
		n--
	}
	return n
}

// authorize returns the status and message refusing r, or 0 to serve it.
func (h *Hub) authorize(r *http.Request) (int, string) {
	if h.token == "" {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			return http.StatusForbidden, "this worker serves its live streams to loopback clients only: set CAPSTAN_STREAM_TOKEN on the worker and its followers to serve others"
		}
		// A loopback connection may still come from a web page whose
		// name was rebound to 127.0.0.1 (DNS rebinding): its Host is
		// that page's name, neither a loopback one nor the hub's own
		// (the host of the URL it advertises, this machine's name for
		// an address on every interface).
		if host := hostOnly(r.Host); !IsLoopbackHost(host) && !strings.EqualFold(host, h.ownHost()) {
			return http.StatusForbidden, "this worker serves its live streams without a token only to requests for a loopback host (localhost, 127.0.0.1, [::1]), not " + strconv.Quote(r.Host)
		}
		return 0, ""
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || subtle.ConstantTimeCompare([]byte(got), []byte(h.token)) != 1 {
		return http.StatusUnauthorized, "this worker's live streams need its CAPSTAN_STREAM_TOKEN as a bearer token"
	}
	return 0, ""
}

// ownHost is the host of the URL the hub advertises; empty when it has
// none.
func (h *Hub) ownHost() string {
	u, err := url.Parse(h.URL())
	if err != nil {
		return ""
	}
	return u.Hostname()
}

// hostOnly is a Host header's host, without its port.
func hostOnly(hostport string) string {
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		return h
	}
	return hostport
}

// stream is one follower's response.
type stream struct {
	h      *Hub
	w      http.ResponseWriter
	rc     *http.ResponseController
	id     string
	remote string
}

// await returns the attempt once the hub has heard of it, registered as
// listened to; nil when the follower left or could not be written to.
func (s *stream) await(r *http.Request, keepAlive <-chan time.Time) *attempt {
	for {
		a, added := s.h.listen(s.id)
		if a != nil {
			return a
		}
		select {
		case <-added:
		case <-keepAlive:
			if !s.keepAlive() {
				return nil
			}
		case <-r.Context().Done():
			return nil
		}
	}
}

// write writes one piece within the hub's write timeout and flushes it;
// false when the follower is gone or did not take it in time.
func (s *stream) write(format string, args ...any) bool {
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.h.writeTimeout)); err != nil {
		return false // a connection without deadlines could hold the worker forever
	}
	if _, err := fmt.Fprintf(s.w, format, args...); err != nil {
		s.cut(err)
		return false
	}
	return s.flush()
}

func (s *stream) flush() bool {
	if err := s.rc.SetWriteDeadline(time.Now().Add(s.h.writeTimeout)); err != nil {
		return false
	}
	if err := s.rc.Flush(); err != nil {
		s.cut(err)
		return false
	}
	return true
}

func (s *stream) send(kind string, ev Event) bool {
	data, _ := json.Marshal(ev)
	return s.write("event: %s\ndata: %s\n\n", kind, data)
}

func (s *stream) keepAlive() bool { return s.write(": keep-alive\n\n") }

// cut logs a follower whose write failed by its deadline: it stopped
// reading, and its connection is given back.
func (s *stream) cut(err error) {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		s.h.logger.Warn("livestream: cut a follower that stopped reading",
			"attempt_id", s.id, "remote", s.remote, "write_timeout", s.h.writeTimeout.String())
	}
}
