package livestream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/capstanhq/capstan/internal/config"
)

// Subscribe follows one attempt on the hub at baseURL from byte offset
// from, calling fn for every event in order, until the stream ends (nil
// error after the end event), ctx is done or the connection fails. A
// caller that reconnects passes the last event's Next as from, so no text
// is delivered twice.
func Subscribe(ctx context.Context, c *http.Client, baseURL, attemptID string, from int, fn func(Event)) error {
	return subscribe(ctx, c, baseURL, attemptID, from, false, fn)
}

// ErrUnknownAttempt is SubscribeKnown's error when the hub has not heard of
// the attempt (it ran on another worker, or too long ago).
var ErrUnknownAttempt = errors.New("the hub has no such attempt")

// SubscribeKnown is Subscribe for an attempt the hub may not have: it
// fails at once with ErrUnknownAttempt instead of waiting for it.
func SubscribeKnown(ctx context.Context, c *http.Client, baseURL, attemptID string, from int, fn func(Event)) error {
	return subscribe(ctx, c, baseURL, attemptID, from, true, fn)
}

func subscribe(ctx context.Context, c *http.Client, baseURL, attemptID string, from int, known bool, fn func(Event)) error {
	u, err := url.Parse(strings.TrimRight(baseURL, "/") + Path)
	if err != nil {
		return fmt.Errorf("stream URL %q: %w", baseURL, err)
	}
	q := url.Values{"attempt": {attemptID}, "from": {strconv.Itoa(from)}}
	if known {
		q.Set("known", "1")
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if known && resp.StatusCode == http.StatusNotFound {
		return ErrUnknownAttempt
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("stream %s: %s: %s", u.Redacted(), resp.Status, strings.TrimSpace(string(b)))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLine+len("\r\n"))
	var data strings.Builder
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		switch {
		case line == "":
			if data.Len() == 0 {
				continue
			}
			var ev Event
			if err := json.Unmarshal([]byte(data.String()), &ev); err != nil {
				return fmt.Errorf("stream of %s: bad event %q: %w", attemptID, data.String(), err)
			}
			data.Reset()
			fn(ev)
			if ev.End {
				return nil
			}
		case strings.HasPrefix(line, "data:"):
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
			if data.Len() > MaxLine {
				return fmt.Errorf("stream of %s: an event is longer than %d bytes (the hub's are at most 32 KiB): not a capstan live stream", attemptID, MaxLine)
			}
		}
		// "event:" names are implied by the data; comments keep alive.
	}
	err = sc.Err()
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, bufio.ErrTooLong):
		return fmt.Errorf("stream of %s: a line is longer than %d bytes (the hub's are at most 32 KiB): not a capstan live stream", attemptID, MaxLine)
	case err == nil:
		err = io.EOF
	}
	return fmt.Errorf("stream of %s ended before its end event: %w", attemptID, err)
}

// MaxLine bounds what a follower reads as one line, and one event, of a
// stream: a hub's events carry at most 32 KiB of text (maxEvent), so
// anything longer is not a hub's, and reading it whole would let whoever
// answers take the follower's memory.
const MaxLine = 1 << 20

// FollowerClient is the http.Client a follower reads hubs with. It sends
// token (CAPSTAN_STREAM_TOKEN; empty sends none) as the bearer token only
// to a request whose origin — scheme, host and port — is one of origins
// (CAPSTAN_STREAM_ORIGINS, as config.OriginOf writes them) or a loopback one
// (http://127.0.0.1:9465, http://localhost:…, which stay on this
// machine): a stream URL comes from a worker's heartbeat, which anyone who
// can write to Temporal can set. It follows no redirect to another origin,
// and a redirect within one passes the same check, so the token never
// travels with one.
func FollowerClient(base http.RoundTripper, token string, origins []string) *http.Client {
	if base == nil {
		base = http.DefaultTransport
	}
	return &http.Client{
		Transport: bearer{base: base, token: token, origins: origins},
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if from := via[len(via)-1].URL; config.OriginOf(req.URL) != config.OriginOf(from) {
				return fmt.Errorf("the live stream at %s redirected to another origin, %s: followers do not follow it there", config.OriginOf(from), config.OriginOf(req.URL))
			}
			if len(via) >= 10 {
				return errors.New("the live stream redirected 10 times")
			}
			return nil
		},
	}
}

// IsLoopbackHost reports whether host (a name or address, without a port)
// names this machine's loopback: localhost, a name under .localhost, or a
// loopback address.
func IsLoopbackHost(host string) bool {
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	return ip != nil && ip.IsLoopback()
}

type bearer struct {
	base    http.RoundTripper
	token   string
	origins []string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token == "" || !(IsLoopbackHost(r.URL.Hostname()) || slices.Contains(b.origins, config.OriginOf(r.URL))) {
		return b.base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}
