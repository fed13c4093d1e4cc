package livestream_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/livestream"
)

// serveHub serves h on loopback and returns its base URL and address.
func serveHub(t *testing.T, h *livestream.Hub) (base, addr string) {
	t.Helper()
	srv, err := livestream.Serve(h, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return "http://" + srv.Addr(), srv.Addr()
}

// records is a slog handler that passes each record's message on.
type records struct{ msgs chan string }

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	select {
	case r.msgs <- rec.Message:
	default:
	}
	return nil
}
func (r records) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r records) WithGroup(string) slog.Handler      { return r }

// TestSlowReaderDoesNotStallOthers: two followers that stop reading sit on
// an attempt of 16 MiB beside one that reads, with three connections
// allowed. The reader gets the whole text and its end at once; each slow
// reader is cut within the write timeout (its stream ends without the end
// event) and its connection given back, so a fourth follower is served.
func TestSlowReaderDoesNotStallOthers(t *testing.T) {
	t.Parallel()
	logs := records{msgs: make(chan string, 16)}
	h := livestream.NewHub(livestream.Options{
		MaxBytes: 32 << 20, MaxConns: 3, WriteTimeout: time.Second, Logger: slog.New(logs),
	})
	base, addr := serveHub(t, h)
	const size = 16 << 20
	chunk := strings.Repeat("0123456789abcdef", 4<<10) // 64 KiB
	for range size / len(chunk) {
		h.Publish("big", chunk)
	}
	h.End("big", "completed")

	var slow []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := fmt.Fprintf(c, "GET /v1/attempts?attempt=big HTTP/1.1\r\nHost: localhost\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		slow = append(slow, c)
	}

	readAll := func() (int, error) {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		n, ended := 0, false
		err := livestream.Subscribe(ctx, http.DefaultClient, base, "big", 0, func(ev livestream.Event) {
			n += len(ev.Text)
			ended = ended || ev.End
		})
		if err == nil && !ended {
			err = errors.New("no end event")
		}
		return n, err
	}
	start := time.Now()
	if n, err := readAll(); err != nil || n != size {
		t.Fatalf("the reading follower got %d of %d bytes: %v", n, size, err)
	}
	t.Logf("the reading follower got 16 MiB in %s beside two stalled ones", time.Since(start).Round(time.Millisecond))

	for cut := 0; cut < len(slow); {
		select {
		case msg := <-logs.msgs:
			if strings.Contains(msg, "stopped reading") {
				cut++
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%d of %d slow readers were cut within 10 s; want each within the 1 s write timeout", cut, len(slow))
		}
	}
	for i, c := range slow {
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(bufio.NewReader(c))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("slow reader %d: its connection is still open after it was cut", i)
		}
		if strings.Contains(string(got), "event: end") {
			t.Errorf("slow reader %d got the end event: it was never cut", i)
		}
	}
	if n, err := readAll(); err != nil || n != size {
		t.Fatalf("a follower after the slow ones were cut got %d of %d bytes: %v", n, size, err)
	}
}

// TestHubCapsConnections: past MaxConns a connection is refused with 503.
func TestHubCapsConnections(t *testing.T) {
	t.Parallel()
	h := livestream.NewHub(livestream.Options{MaxConns: 1})
	base, _ := serveHub(t, h)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+livestream.Path+"?attempt=waiting", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %s, want 200", resp.Status)
	}
	err = livestream.SubscribeKnown(t.Context(), http.DefaultClient, base, "other", 0, func(livestream.Event) {})
	if err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("a second connection with MaxConns 1: %v, want a 503", err)
	}
}

// TestHubRequiresItsToken: with a token, every client must present it as
// a bearer token; livestream.FollowerClient does, to a loopback hub.
func TestHubRequiresItsToken(t *testing.T) {
	t.Parallel()
	h := livestream.NewHub(livestream.Options{Token: "s3cret"})
	base, _ := serveHub(t, h)
	h.Publish("a", "text")
	h.End("a", "completed")
	for _, c := range []*http.Client{
		http.DefaultClient,
		livestream.FollowerClient(nil, "wrong", nil),
	} {
		err := livestream.SubscribeKnown(t.Context(), c, base, "a", 0, func(livestream.Event) {})
		if err == nil || !strings.Contains(err.Error(), "401") {
			t.Errorf("without the token: %v, want a 401", err)
		}
	}
	var got string
	c := livestream.FollowerClient(nil, "s3cret", nil)
	if err := livestream.SubscribeKnown(t.Context(), c, base, "a", 0, func(ev livestream.Event) { got += ev.Text }); err != nil || got != "text" {
		t.Fatalf("with the token: %q, %v; want the text", got, err)
	}
}

// TestHubWithoutATokenServesLoopbackOnly: a hub with no token refuses a
// client that is not on this machine.
func TestHubWithoutATokenServesLoopbackOnly(t *testing.T) {
	t.Parallel()
	h := livestream.NewHub(livestream.Options{})
	for addr, want := range map[string]int{
		"192.0.2.7:51000":  http.StatusForbidden,
		"[2001:db8::1]:80": http.StatusForbidden,
		"127.0.0.1:51000":  http.StatusNotFound, // served: the attempt is unknown
		"[::1]:51000":      http.StatusNotFound,
	} {
		r := httptest.NewRequest(http.MethodGet, livestream.Path+"?attempt=a&known=1", nil)
		r.RemoteAddr, r.Host = addr, "127.0.0.1:9465"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("a client at %s: %d, want %d", addr, w.Code, want)
		}
	}
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// TestHubSweepsUnheardAttemptsOnItsTimer: on a tick of its timer, with no
// attempt publishing, the hub forgets an attempt past Retain that nobody
// reads, and keeps one a follower still reads, however old.
func TestHubSweepsUnheardAttemptsOnItsTimer(t *testing.T) {
	t.Parallel()
	clk := &clock{now: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)}
	ticks := make(chan time.Time)
	h := livestream.NewHub(livestream.Options{Retain: time.Minute, Now: clk.Now, Ticks: ticks})
	base, _ := serveHub(t, h)
	tick := func() {
		// The sweeper takes one tick at a time: the second is taken
		// only once the first sweep is done.
		for range 2 {
			select {
			case ticks <- clk.Now():
			case <-time.After(5 * time.Second):
				t.Fatal("the hub's sweeper took no tick within 5 s")
			}
		}
	}

	h.Publish("old", "forgotten")
	h.End("old", "completed")
	h.Begin("live")
	h.Publish("live", "first ")
	events, _ := collect(t, base, "live", 0)
	if ev := next(t, events); ev.Text != "first " {
		t.Fatalf("event = %+v, want the first text", ev)
	}

	tick()
	if err := livestream.SubscribeKnown(t.Context(), http.DefaultClient, base, "old", 0, func(livestream.Event) {}); err != nil {
		t.Fatalf("before Retain passed: %v, want the old attempt still kept", err)
	}
	clk.Add(2 * time.Minute)
	tick()
	err := livestream.SubscribeKnown(t.Context(), http.DefaultClient, base, "old", 0, func(livestream.Event) {})
	if !errors.Is(err, livestream.ErrUnknownAttempt) {
		t.Fatalf("after Retain: %v, want the unread old attempt swept", err)
	}
	h.Publish("live", "second")
	if ev := next(t, events); ev.Text != "second" || ev.From != 6 {
		t.Fatalf("event = %+v, want the followed attempt kept and its next text", ev)
	}
}

// TestUnknownAttemptsLeaveNothingBehind: a follower that waits for an
// attempt the hub never heard of, and hangs up, leaves no entry.
func TestUnknownAttemptsLeaveNothingBehind(t *testing.T) {
	t.Parallel()
	h := livestream.NewHub(livestream.Options{})
	base, _ := serveHub(t, h)
	for i := range 100 {
		ctx, cancel := context.WithCancel(t.Context())
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s%s?attempt=nobody-%d", base, livestream.Path, i), nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET an unknown attempt: %s, want 200 (a follower may ask before the first byte)", resp.Status)
		}
		cancel()
		resp.Body.Close()
	}
	if n := livestream.Attempts(h); n != 0 {
		t.Fatalf("the hub holds %d attempts after 100 GETs for unknown ones, want 0", n)
	}
}
