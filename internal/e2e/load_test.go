package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// outage is the model provider's downtime: while it is down, the fault
// answers every request 503 — an overload, which counts against the
// breaker — and counts it by the API key that sent it, which names the
// worker (each worker of the test has a key of its own).
type outage struct {
	mu       sync.Mutex
	down     bool
	received map[string][]time.Time // when each request answered 503 arrived, by API key
	after    int                    // requests served after the recovery
}

func (o *outage) fault(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.down {
		o.after++
		return false
	}
	key := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
	o.received[key] = append(o.received[key], time.Now())
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"error":{"message":"The server is overloaded.","type":"server_error"}}`))
	return true
}

// setDown starts or ends the outage; every request is answered under the
// same lock, so each one is counted on the side of the switch it reached.
func (o *outage) setDown(down bool) time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.down = down
	return time.Now()
}

// between counts key's requests answered 503 that arrived in [from, to).
func (o *outage) between(key string, from, to time.Time) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, at := range o.received[key] {
		if !at.Before(from) && at.Before(to) {
			n++
		}
	}
	return n
}

// TestLongModelOutageUnderLoad is issue 7's second "done when": 50 sandbox
// tasks start at once on two workers while the model provider is down for
// 20 s, then it is back. While it is down, the provider receives from each
// worker at most the breaker threshold plus one half-open probe per open
// period; every task waits (a BreakerOpen wait spends no retry budget) and
// all 50 complete once the provider is back. Each worker's /metrics shows
// model/openai open during the outage and closed after it.
//
// Settings: CAPSTAN_BREAKER_FAILURES=5 (the design's threshold) and
// CAPSTAN_BREAKER_OPEN=5s instead of the design's 30 s, so that the 20 s
// outage spans several open periods and the test stays near a minute; the
// bound per worker is then 5 + 20 s / 5 s = 9 requests.
//
// The bound holds because a closed breaker whose last call failed lets one
// call through at a time until one is answered (internal/breaker, Allow):
// only the calls already in flight when the first failure came back escape
// it. The log of each worker's transitions (in the test's output) shows how
// many went out before the breaker opened, in each open period and in each
// half-open probe.
func TestLongModelOutageUnderLoad(t *testing.T) {
	requireLong(t)
	const (
		tasks     = 50
		threshold = 5
		openFor   = 5 * time.Second
		downFor   = 20 * time.Second
	)
	probes := int(downFor / openFor) // an open period ends at most this often while it is down
	bound := threshold + probes

	sb := startSandbox(t)
	out := &outage{received: map[string][]time.Time{}}
	sb.Model.SetFault(out.fault)

	// One pool of two workers: the same queue and ledger, each with an API
	// key of its own so the provider can tell who sent what.
	const queue = "e2e-load"
	env := append(endpointEnv(t, queue, sb),
		fmt.Sprintf("CAPSTAN_BREAKER_FAILURES=%d", threshold), "CAPSTAN_BREAKER_OPEN="+openFor.String())
	workerKeys := []string{openAIKey + "-w1", openAIKey + "-w2"}
	workers := make([]*workerProcess, len(workerKeys))
	urls := make([]string, len(workerKeys))
	for i, key := range workerKeys {
		workers[i] = startWorker(t, append(append([]string(nil), env...), "OPENAI_API_KEY="+key))
		urls[i] = workers[i].metricsURL(t)
	}
	openState := map[string]string{"key": "model/openai", "state": "open"}
	closedState := map[string]string{"key": "model/openai", "state": "closed"}
	for i, url := range urls {
		if v, _ := testenv.ScrapeMetrics(t, url).Value("capstan_breaker_state", closedState); v != 1 {
			t.Fatalf("worker %d: model/openai is not closed before the outage", i+1)
		}
	}

	// The provider goes down, then 50 tasks start at once, through the
	// Temporal client as `starter run` does: 50 starter binaries take
	// 4-5 s to start under -race, which spreads the load over a quarter of
	// the outage instead of putting it on the breakers all at once.
	wentDown := out.setDown(true)
	prefix := fmt.Sprintf("e2e-load-%d", time.Now().UnixNano())
	ids := make([]string, tasks)
	startErrs := make([]error, tasks)
	var wg sync.WaitGroup
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-%02d", prefix, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, startErrs[i] = temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{
				ID: workflows.WorkflowID(ids[i]), TaskQueue: queue,
			}, workflows.AgentTask, workflows.AgentTaskInput{
				TaskID: ids[i], Tenant: config.DefaultTenant, Prompt: "Say hello.", Repo: "capstan-sandbox/demo",
				Model: "openai:hello", MaxTurns: config.DefaultMaxTurns,
			})
		}()
	}
	wg.Wait()
	allStarted := time.Now()
	for i, err := range startErrs {
		if err != nil {
			t.Fatalf("start %s: %v", ids[i], err)
		}
	}
	if allStarted.Sub(wentDown) >= downFor {
		t.Fatalf("starting %d tasks took %s, longer than the outage", tasks, allStarted.Sub(wentDown))
	}

	// /metrics shows each worker's breaker open while the provider is down.
	// A worker that has run no model turn yet has nothing to trip on, so
	// each worker is awaited only while the outage lasts.
	for i, url := range urls {
		s := waitForMetric(t, url, "capstan_breaker_state", openState, 1)
		if v, _ := s.Value("capstan_breaker_state", closedState); v != 0 {
			t.Errorf("worker %d: model/openai shown open and closed at once:\n%s", i+1, s.Samples("capstan_breaker_state"))
		}
	}
	if since := time.Since(wentDown); since >= downFor {
		t.Fatalf("the breakers were seen open %s after the outage began, after it should have ended", since)
	}

	// The provider is back after 20 s: wait for that moment's timer.
	<-time.After(downFor - time.Since(wentDown))
	recovered := out.setDown(false)

	done := make([]time.Duration, tasks)
	for i, id := range ids {
		res := waitResult(t, id)
		done[i] = time.Since(recovered)
		if res.Status != workflows.StatusCompleted {
			t.Errorf("task %s: %s %s %s", id, res.Status, res.FailureCode, res.Message)
		}
	}
	allDone := time.Since(recovered)

	// Requests the provider received while down, per worker and in total.
	total := 0
	for i, key := range workerKeys {
		n := out.between(key, time.Time{}, recovered)
		total += n
		t.Logf("worker %d: %s", i+1, breakerLife(t, workers[i], out, key))
		t.Logf("worker %d: the provider received %d requests during the %s outage (bound %d = threshold %d + %d probes, one per %s open period)",
			i+1, n, recovered.Sub(wentDown).Round(time.Millisecond), bound, threshold, probes, openFor)
		if n > bound {
			t.Errorf("worker %d sent %d requests to the downed provider, want at most %d", i+1, n, bound)
		}
	}
	out.mu.Lock()
	if len(out.received) > len(workerKeys) {
		t.Errorf("requests from unknown API keys: %v", out.received)
	}
	after := out.after
	out.mu.Unlock()
	sort.Slice(done, func(i, j int) bool { return done[i] < done[j] })
	t.Logf("total: %d requests while down (bound %d for %d workers); %d tasks started in %s; all %d completed %s after the recovery (median %s); %d requests served after it",
		total, bound*len(workerKeys), len(workerKeys), tasks, allStarted.Sub(wentDown).Round(time.Millisecond),
		tasks, allDone.Round(time.Millisecond), done[tasks/2].Round(time.Millisecond), after)

	// And /metrics shows each breaker closed again.
	for i, url := range urls {
		s := testenv.ScrapeMetrics(t, url)
		if v, _ := s.Value("capstan_breaker_state", closedState); v != 1 {
			t.Errorf("worker %d: after the outage model/openai is not shown closed:\n%s", i+1, s.Samples("capstan_breaker_state"))
		}
		opened, _ := s.Value("capstan_breaker_transitions_total", map[string]string{"key": "model/openai", "to": "open"})
		closed, _ := s.Value("capstan_breaker_transitions_total", map[string]string{"key": "model/openai", "to": "closed"})
		t.Logf("worker %d: model/openai opened %v times, closed %v times", i+1, opened, closed)
	}
}

// breakerLife tells, from the worker's logged transitions of model/openai,
// how many of the requests its key sent went out before the breaker first
// opened, during each open period, and during each half-open probe.
func breakerLife(t *testing.T, w *workerProcess, out *outage, key string) string {
	t.Helper()
	ts := breakerTransitions(t, w, "model/openai")
	if len(ts) == 0 {
		return "model/openai never changed state"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d requests before model/openai opened", out.between(key, time.Time{}, ts[0].at))
	for i, tr := range ts {
		end := time.Now()
		if i+1 < len(ts) {
			end = ts[i+1].at
		}
		fmt.Fprintf(&b, "; %s for %s: %d", tr.to, end.Sub(tr.at).Round(time.Millisecond), out.between(key, tr.at, end))
	}
	return b.String()
}
