package livestream_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/livestream"
)

// hosts serves several named origins from httptest servers on loopback:
// its transport dials the server registered for a request's host:port,
// so a follower sees the URL's own host (worker-1.internal), not
// 127.0.0.1, as it would across a network.
type hosts struct {
	mu     sync.Mutex
	byAddr map[string]string   // host:port → the server's listener address
	auth   map[string][]string // host:port → the Authorization of each request it got
}

func newHosts() *hosts {
	return &hosts{byAddr: map[string]string{}, auth: map[string][]string{}}
}

// serve registers handler as the server of hostport (worker-1.internal:9465).
func (hs *hosts) serve(t *testing.T, hostport string, handler http.HandlerFunc) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hs.mu.Lock()
		hs.auth[hostport] = append(hs.auth[hostport], r.Header.Get("Authorization"))
		hs.mu.Unlock()
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	hs.mu.Lock()
	hs.byAddr[hostport] = srv.Listener.Addr().String()
	hs.mu.Unlock()
}

// got is the Authorization headers hostport received, one per request.
func (hs *hosts) got(hostport string) []string {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	return append([]string(nil), hs.auth[hostport]...)
}

func (hs *hosts) transport() http.RoundTripper {
	return &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		hs.mu.Lock()
		real, ok := hs.byAddr[addr]
		hs.mu.Unlock()
		if !ok {
			return nil, fmt.Errorf("no test server for %s", addr)
		}
		return (&net.Dialer{}).DialContext(ctx, network, real)
	}}
}

// endStream answers with a stream that ends at once.
func endStream(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	io.WriteString(w, "event: end\ndata: {\"from\":0,\"next\":0,\"end\":true,\"outcome\":\"completed\"}\n\n")
}

// TestFollowerSendsTheTokenOnlyToItsOrigins (issue 32 item 13): the
// follower's client sends CAPSTAN_STREAM_TOKEN to a stream URL of an
// origin in CAPSTAN_STREAM_ORIGINS, and not to one a heartbeat names
// elsewhere; a configured origin that redirects elsewhere is not followed
// there, and one that redirects within itself still gets the token.
func TestFollowerSendsTheTokenOnlyToItsOrigins(t *testing.T) {
	t.Parallel()
	const token = "stream-t0ken-9c1d"
	hs := newHosts()
	hs.serve(t, "worker-1.internal:9465", endStream)
	hs.serve(t, "evil.example:9465", endStream)
	hs.serve(t, "evil.example:80", endStream)
	hs.serve(t, "redirect.internal:9465", func(w http.ResponseWriter, r *http.Request) {
		to := "http://evil.example:9465" + r.URL.RequestURI()
		if r.URL.Query().Get("attempt") == "same" {
			to = "/moved" + livestream.Path + "?" + r.URL.RawQuery
		}
		if strings.HasPrefix(r.URL.Path, "/moved") {
			endStream(w, r)
			return
		}
		http.Redirect(w, r, to, http.StatusFound)
	})
	origins, err := config.StreamOrigins("http://WORKER-1.internal:9465/ignored/path, http://redirect.internal:9465")
	if err != nil {
		t.Fatal(err)
	}
	c := livestream.FollowerClient(hs.transport(), token, origins)
	ctx := t.Context()

	if err := livestream.Subscribe(ctx, c, "http://worker-1.internal:9465", "a", 0, func(livestream.Event) {}); err != nil {
		t.Fatalf("following a configured origin: %v", err)
	}
	if got := hs.got("worker-1.internal:9465"); len(got) != 1 || got[0] != "Bearer "+token {
		t.Errorf("the configured origin got Authorization %q; want the token", got)
	}
	for _, base := range []string{"http://evil.example:9465", "http://evil.example"} {
		if err := livestream.Subscribe(ctx, c, base, "a", 0, func(livestream.Event) {}); err != nil {
			t.Fatalf("following %s: %v", base, err)
		}
	}
	for _, hp := range []string{"evil.example:9465", "evil.example:80"} {
		if got := hs.got(hp); len(got) != 1 || got[0] != "" {
			t.Errorf("%s, which no one configured, got Authorization %q; want a request without it", hp, got)
		}
	}

	err = livestream.Subscribe(ctx, c, "http://redirect.internal:9465", "elsewhere", 0, func(livestream.Event) {})
	if err == nil || !strings.Contains(err.Error(), "redirected to another origin, http://evil.example:9465") {
		t.Errorf("a configured origin redirecting elsewhere: %v; want the redirect refused", err)
	}
	if got := hs.got("evil.example:9465"); len(got) != 1 {
		t.Errorf("the redirect's target got %d requests (Authorization %q); want none beyond the direct one", len(got), got)
	}
	if err := livestream.Subscribe(ctx, c, "http://redirect.internal:9465", "same", 0, func(livestream.Event) {}); err != nil {
		t.Fatalf("a redirect within the configured origin: %v", err)
	}
	if got := hs.got("redirect.internal:9465"); len(got) != 3 || got[0] != "Bearer "+token || got[1] != "Bearer "+token || got[2] != "Bearer "+token {
		t.Errorf("the redirecting origin got Authorization %q; want the token on each of its 3 requests", got)
	}
}

// TestHubWithoutATokenRefusesForeignHosts (issue 32 item 13): a hub with
// no token serves a loopback connection only when its Host names loopback
// or the hub's own advertised host, so a page whose name was rebound to
// 127.0.0.1 (DNS rebinding) cannot read the streams from a browser on
// this machine.
func TestHubWithoutATokenRefusesForeignHosts(t *testing.T) {
	t.Parallel()
	h := livestream.NewHub(livestream.Options{URL: "http://build-7.corp.example:9465"})
	base, addr := serveHub(t, h)
	_, port, _ := net.SplitHostPort(addr)
	for host, want := range map[string]int{
		"attacker.example:" + port:     http.StatusForbidden,
		"attacker.example":             http.StatusForbidden,
		"127.0.0.1.nip.io:" + port:     http.StatusForbidden,
		"localhost:" + port:            http.StatusNotFound, // served: the attempt is unknown
		"api.localhost:" + port:        http.StatusNotFound,
		"127.0.0.1:" + port:            http.StatusNotFound,
		"[::1]:" + port:                http.StatusNotFound,
		"127.0.0.2":                    http.StatusNotFound,
		"BUILD-7.corp.example:" + port: http.StatusNotFound, // its own name
	} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, base+livestream.Path+"?attempt=a&known=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s from loopback: %s %q, want %d", host, resp.Status, body, want)
		}
	}
}

// TestFollowerReadsLinesOfAtMostOneMiB (issue 32 item 14): whatever
// answers a follower at a stream URL, a line or an event longer than
// 1 MiB ends the stream with one short error, not a read of all of it.
func TestFollowerReadsLinesOfAtMostOneMiB(t *testing.T) {
	t.Parallel()
	huge := strings.Repeat("x", 2<<20)
	for name, body := range map[string]string{
		"a long line":            "data: {\"text\":\"" + huge + "\"}\n\n",
		"a line without its end": "data: " + huge,
		"an event of many lines": strings.Repeat("data: "+strings.Repeat("y", 64<<10)+"\n", 40) + "\n",
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, body)
		}))
		t.Cleanup(srv.Close)
		var events int
		err := livestream.Subscribe(t.Context(), http.DefaultClient, srv.URL, "a", 0, func(livestream.Event) { events++ })
		if err == nil || !strings.Contains(err.Error(), "longer than 1048576 bytes") || len(err.Error()) > 300 || events != 0 {
			msg := fmt.Sprint(err)
			if len(msg) > 300 {
				msg = msg[:300] + fmt.Sprintf("… (%d bytes)", len(msg))
			}
			t.Errorf("%s: %d events, error %s; want none and one short error saying the line is too long", name, events, msg)
		}
	}
	// A hub's own events are far below the bound and read as ever.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "data: {\"text\":\""+strings.Repeat("z", 32<<10)+"\",\"from\":0,\"next\":32768}\n\n")
		endStream(w, nil)
	}))
	t.Cleanup(srv.Close)
	var text string
	if err := livestream.Subscribe(t.Context(), http.DefaultClient, srv.URL, "a", 0, func(ev livestream.Event) { text += ev.Text }); err != nil || len(text) != 32<<10 {
		t.Fatalf("a 32 KiB event: %d bytes, %v; want it whole", len(text), err)
	}
}
