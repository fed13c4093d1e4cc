package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/testenv"
)

// streamURL is where the worker serves its live streams, as it printed it.
func (w *workerProcess) streamURL(t *testing.T) string {
	t.Helper()
	line := w.stdoutLine("live stream: ")
	if line == "" {
		t.Fatalf("the worker printed no live stream URL:\n%s", w.logs())
	}
	return strings.TrimPrefix(line, "live stream: ")
}

// memory is what a worker's metrics say of its memory.
type memory struct {
	// heapGoal is the Go runtime's next GC target, which follows the heap
	// that was live at the last collection: unlike the heap allocated, it
	// does not swing with garbage not yet collected.
	heapGoal, heapAlloc, rss float64
}

func (m memory) String() string {
	return fmt.Sprintf("heap live-goal %.1f MiB, heap allocated %.1f MiB, resident %.1f MiB",
		m.heapGoal/(1<<20), m.heapAlloc/(1<<20), m.rss/(1<<20))
}

func workerMemory(t *testing.T, metricsURL string) memory {
	t.Helper()
	s := testenv.ScrapeMetrics(t, metricsURL)
	var m memory
	for name, v := range map[string]*float64{
		"go_memstats_next_gc_bytes":     &m.heapGoal,
		"go_memstats_heap_alloc_bytes":  &m.heapAlloc,
		"process_resident_memory_bytes": &m.rss,
	} {
		got, ok := s.Value(name, nil)
		if !ok {
			t.Fatalf("the worker's metrics have no %s", name)
		}
		*v = got
	}
	return m
}

// TestStreamHubStaysFlatUnderUnknownAttempts GETs the live stream of a
// real worker 10,000 times, each for an attempt no worker ever ran (with a
// long id, as an attacker would choose), hanging up once the stream
// opens. The worker's live heap must stay flat: the hub keeps nothing for
// an attempt nobody runs.
func TestStreamHubStaysFlatUnderUnknownAttempts(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	w := startWorker(t, endpointEnv(t, "e2e-stream-flood", sb))
	base, metrics := w.streamURL(t), w.metricsURL(t)

	before := workerMemory(t, metrics)
	const gets, parallel = 10_000, 8
	padding := strings.Repeat("x", 8<<10)
	statuses := make(chan int, gets)
	var wg sync.WaitGroup
	for g := range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < gets; i += parallel {
				statuses <- openAndHangUp(t, base, fmt.Sprintf("nobody/%s/%d", padding, i))
			}
		}()
	}
	wg.Wait()
	close(statuses)
	served := 0
	for s := range statuses {
		if s == http.StatusOK {
			served++
		}
	}
	if served != gets {
		t.Fatalf("the worker served %d of %d GETs; want every one (a loopback follower needs no token)", served, gets)
	}
	after := workerMemory(t, metrics)
	t.Logf("worker memory before %d GETs: %s", gets, before)
	t.Logf("worker memory after  %d GETs: %s", gets, after)
	// 10,000 ids of 8 KiB are 80 MiB if the hub keeps them.
	if grew := after.heapGoal - before.heapGoal; grew > 24<<20 {
		t.Errorf("the worker's heap goal grew by %.1f MiB over %d GETs for unknown attempts; want it flat (under 24 MiB)", grew/(1<<20), gets)
	}
}

// openAndHangUp opens the stream of attempt and closes it as soon as the
// worker answers, returning the status.
func openAndHangUp(t *testing.T, base, attempt string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	u := base + "/v1/attempts?" + url.Values{"attempt": {attempt}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		t.Error(err)
		return 0
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("GET the stream of an unknown attempt: %v", err)
		return 0
	}
	cancel()
	resp.Body.Close()
	return resp.StatusCode
}

// TestFollowSendsTheStreamToken: a worker with CAPSTAN_STREAM_TOKEN serves
// its live streams only to a follower that presents it, even on loopback,
// and `starter run --follow` with the same variable shows the text of the
// attempts as they stream (the stalled attempt's text is only ever in the
// stream).
func TestFollowSendsTheStreamToken(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	st := stallFirstAttempt(sb)
	close(st.release)
	const token = "e2e-stream-token-5b1f"
	env := append(endpointEnv(t, "e2e-follow-token", sb), "CAPSTAN_STREAM_TOKEN="+token)
	w := startWorker(t, env)

	u := w.streamURL(t) + "/v1/attempts?attempt=any&known=1"
	for _, auth := range []string{"", "Bearer wrong-token", "Bearer " + token + "x"} {
		req, err := http.NewRequest(http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET the stream with Authorization %q: %s, want 401 Unauthorized", auth, resp.Status)
		}
	}

	taskID := fmt.Sprintf("e2e-follow-token-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run", "--prompt", "hello", "--model", "openai:hello", "--id", taskID, "--idle-timeout", "4s", "--follow")
	t.Logf("stdout:\n%s", r.stdout)
	if r.code != 0 {
		t.Fatalf("starter run --follow: exit %d\nstderr: %s", r.code, r.stderr)
	}
	for _, want := range []string{
		"[t1/a1] Let me think about the greeting first.",
		"[t1/a2] " + helloAnswer + "\n[t1/a2 committed]\n",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("the output does not say %q: the follower did not read the stream", want)
		}
	}
}
