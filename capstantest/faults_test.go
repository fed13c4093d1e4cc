package capstantest_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/capstanhq/capstan/capstantest"
)

// counter is a service whose POST /things creates a thing.
func counter(n *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "made")
	})
}

func post(c *http.Client, url string) (int, error) {
	resp, err := c.Post(url+"/things", "text/plain", strings.NewReader("x"))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, nil
}

// TestFaultsFailBeforeActing: the refused requests never reach the
// service; the next one does; every one is counted.
func TestFaultsFailBeforeActing(t *testing.T) {
	var made atomic.Int64
	f := capstantest.NewFaults(counter(&made))
	defer f.Close()
	srv := httptest.NewServer(f)
	defer srv.Close()
	f.FailBeforeActing(http.MethodPost, "/things", http.StatusBadGateway, 2)
	for i, want := range []int{502, 502, 201} {
		got, err := post(srv.Client(), srv.URL)
		if err != nil || got != want {
			t.Fatalf("request %d: %d %v, want %d", i+1, got, err, want)
		}
	}
	if made.Load() != 1 || f.Requests(http.MethodPost, "/things") != 3 || f.Requests(http.MethodGet, "/things") != 0 {
		t.Fatalf("made %d, counted %d: want 1 and 3", made.Load(), f.Requests(http.MethodPost, "/things"))
	}
}

// TestFaultsDelayAnswer: the service acts at once; a client that gives up
// before the delay gets no answer; Close releases a held answer.
func TestFaultsDelayAnswer(t *testing.T) {
	var made atomic.Int64
	f := capstantest.NewFaults(counter(&made))
	srv := httptest.NewServer(f)
	defer srv.Close()
	f.DelayAnswer(http.MethodPost, "/things", time.Hour, 0)
	c := &http.Client{Timeout: 200 * time.Millisecond}
	if _, err := post(c, srv.URL); err == nil {
		t.Fatal("a held answer reached a client with a 200ms timeout")
	}
	if made.Load() != 1 {
		t.Fatalf("made %d, want 1: the service acts before the answer is held", made.Load())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/things", strings.NewReader("x"))
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = errors.New("answered")
		}
		done <- err
	}()
	for made.Load() < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	f.Close()
	if err := <-done; err == nil || ctx.Err() != nil || err.Error() == "answered" {
		t.Fatalf("after Close: %v, want the connection dropped at once", err)
	}
	f.Clear()
	if got, err := post(srv.Client(), srv.URL); err != nil || got != http.StatusCreated {
		t.Fatalf("after Clear: %d %v, want 201", got, err)
	}
}
