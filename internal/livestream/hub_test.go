package livestream_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/livestream"
)

func serve(t *testing.T, h *livestream.Hub) string {
	t.Helper()
	srv, err := livestream.Serve(h, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close(context.Background()) })
	return "http://" + srv.Addr()
}

// collect subscribes from offset and sends every event to the channel.
func collect(t *testing.T, base, id string, from int) (<-chan livestream.Event, <-chan error) {
	t.Helper()
	events, done := make(chan livestream.Event, 64), make(chan error, 1)
	go func() {
		done <- livestream.Subscribe(t.Context(), http.DefaultClient, base, id, from, func(ev livestream.Event) { events <- ev })
	}()
	return events, done
}

func next(t *testing.T, events <-chan livestream.Event) livestream.Event {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
		return livestream.Event{}
	}
}

// TestSubscriberSeesEveryByteOnceLiveAndLate: a follower that subscribes
// before the first byte gets each delta as it is published; one that
// subscribes after the end gets the whole text at once; one that resumes
// from an offset gets only what follows it.
func TestSubscriberSeesEveryByteOnceLiveAndLate(t *testing.T) {
	t.Parallel()
	h := livestream.NewHub(livestream.Options{})
	base := serve(t, h)
	if h.URL() != base {
		t.Fatalf("URL = %q, want the bound address %s", h.URL(), base)
	}
	live, liveDone := collect(t, base, "task/t1/a1", 0)

	// The subscription waits for an attempt the hub has not heard of.
	h.Publish("task/t1/a1", "Let me ")
	if ev := next(t, live); ev.Text != "Let me " || ev.From != 0 || ev.Next != 7 {
		t.Fatalf("first event = %+v, want the first delta at offset 0", ev)
	}
	h.Publish("task/t1/a1", "think")
	if ev := next(t, live); ev.Text != "think" || ev.From != 7 || ev.Next != 12 {
		t.Fatalf("second event = %+v, want only the new delta", ev)
	}
	h.End("task/t1/a1", "cut_idle")
	if ev := next(t, live); !ev.End || ev.Outcome != "cut_idle" {
		t.Fatalf("last event = %+v, want the end with its outcome", ev)
	}
	if err := <-liveDone; err != nil {
		t.Fatalf("Subscribe = %v, want nil after the end event", err)
	}
	h.Publish("task/t1/a1", "after the end")

	late, _ := collect(t, base, "task/t1/a1", 0)
	if ev := next(t, late); ev.Text != "Let me think" {
		t.Fatalf("late subscriber got %+v, want the whole text once (nothing published after the end)", ev)
	}
	if ev := next(t, late); !ev.End {
		t.Fatalf("late subscriber got %+v, want the end", ev)
	}
	resumed, _ := collect(t, base, "task/t1/a1", 7)
	if ev := next(t, resumed); ev.Text != "think" || ev.From != 7 {
		t.Fatalf("resumed subscriber got %+v, want the text from offset 7", ev)
	}
}

// TestHubBoundsAnAttemptsText: past MaxBytes the text is cut and the
// follower told.
func TestHubBoundsAnAttemptsText(t *testing.T) {
	t.Parallel()
	h := livestream.NewHub(livestream.Options{MaxBytes: 8})
	base := serve(t, h)
	h.Publish("a", "12345")
	h.Publish("a", "67890")
	h.End("a", "completed")
	events, _ := collect(t, base, "a", 0)
	if ev := next(t, events); ev.Text != "12345678" || !ev.Truncated {
		t.Fatalf("event = %+v, want the first 8 bytes, marked truncated", ev)
	}
}

// TestHubRefusesABadRequest: the attempt is required.
func TestHubRefusesABadRequest(t *testing.T) {
	t.Parallel()
	base := serve(t, livestream.NewHub(livestream.Options{}))
	err := livestream.Subscribe(t.Context(), http.DefaultClient, base, "", 0, func(livestream.Event) {})
	if err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("Subscribe without an attempt = %v, want a 400", err)
	}
}

// TestSubscribeKnownDoesNotWaitForAnUnknownAttempt: a follower asking after
// an attempt that ran elsewhere is told at once; one that ran here gets
// its text.
func TestSubscribeKnownDoesNotWaitForAnUnknownAttempt(t *testing.T) {
	t.Parallel()
	h := livestream.NewHub(livestream.Options{})
	base := serve(t, h)
	err := livestream.SubscribeKnown(t.Context(), http.DefaultClient, base, "elsewhere", 0, func(livestream.Event) {})
	if !errors.Is(err, livestream.ErrUnknownAttempt) {
		t.Fatalf("SubscribeKnown(unknown) = %v, want ErrUnknownAttempt", err)
	}
	h.Publish("here", "Done.")
	h.End("here", "completed")
	var got []livestream.Event
	if err := livestream.SubscribeKnown(t.Context(), http.DefaultClient, base, "here", 0, func(ev livestream.Event) { got = append(got, ev) }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Text != "Done." || !got[1].End {
		t.Fatalf("events = %+v, want the text and the end", got)
	}
}

// TestBeginRestartsAnEndedAttempt: an attempt run again under the same id
// (after a workflow reset) streams afresh, not after its old text.
func TestBeginRestartsAnEndedAttempt(t *testing.T) {
	t.Parallel()
	h := livestream.NewHub(livestream.Options{URL: "http://worker-1:9465"})
	base := serve(t, h)
	if got := h.Begin("a"); got != "http://worker-1:9465" {
		t.Fatalf("Begin = %q, want the advertised URL", got)
	}
	h.Publish("a", "first run")
	h.End("a", "cut_idle")
	h.Begin("a")
	h.Publish("a", "second")
	h.End("a", "completed")
	events, _ := collect(t, base, "a", 0)
	if ev := next(t, events); ev.Text != "second" {
		t.Fatalf("event = %+v, want only the second run's text", ev)
	}
	if ev := next(t, events); !ev.End || ev.Outcome != "completed" {
		t.Fatalf("event = %+v, want the second run's end", ev)
	}
}
