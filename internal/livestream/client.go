package livestream

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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
	r := bufio.NewReaderSize(resp.Body, 64<<10)
	var data strings.Builder
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("stream of %s ended before its end event: %w", attemptID, err)
		}
		line = strings.TrimRight(line, "\r\n")
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
		}
		// "event:" names are implied by the data; comments keep alive.
	}
}

// WithToken returns a RoundTripper that sends token as the bearer token of
// every request it passes to base (http.DefaultTransport when nil): what a
// hub with CAPSTAN_STREAM_TOKEN requires. An empty token adds nothing.
func WithToken(base http.RoundTripper, token string) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	if token == "" {
		return base
	}
	return bearer{base: base, token: token}
}

type bearer struct {
	base  http.RoundTripper
	token string
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}
