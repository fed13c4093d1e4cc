package breaker_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/internal/config"
)

// recorder keeps the transitions a Set reports.
type recorder struct {
	mu  sync.Mutex
	all []breaker.Transition
}

func (r *recorder) add(t breaker.Transition) {
	r.mu.Lock()
	r.all = append(r.all, t)
	r.mu.Unlock()
}

func (r *recorder) path(key breaker.Key) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var steps []string
	for _, t := range r.all {
		if t.Key == key {
			steps = append(steps, string(t.From)+"→"+string(t.To))
		}
	}
	return strings.Join(steps, " ")
}

func newSet(t *testing.T, s config.BreakerSettings) (*breaker.Set, *recorder, *bytes.Buffer) {
	t.Helper()
	rec := &recorder{}
	var logs bytes.Buffer
	set, err := breaker.NewSet(s, breaker.Options{Logger: slog.New(slog.NewJSONHandler(&logs, nil)), OnStateChange: rec.add})
	if err != nil {
		t.Fatal(err)
	}
	return set, rec, &logs
}

// call asks for a permit and reports o; it fails the test if refused.
func call(t *testing.T, s *breaker.Set, key breaker.Key, o breaker.Outcome) {
	t.Helper()
	p, err := s.Allow(key)
	if err != nil {
		t.Fatalf("Allow(%s) = %v, want a permit", key, err)
	}
	p.Done(o)
}

func refused(t *testing.T, s *breaker.Set, key breaker.Key, state breaker.State) *breaker.OpenError {
	t.Helper()
	p, err := s.Allow(key)
	var open *breaker.OpenError
	if !errors.As(err, &open) || open.State != state || open.Key != key {
		t.Fatalf("Allow(%s) = %v, %v; want refused, %s", key, p, err, state)
	}
	return open
}

var quick = config.BreakerSettings{ConsecutiveFailures: 5, FailureRatio: 0.5, MinCalls: 10, Window: time.Minute, OpenFor: 200 * time.Millisecond}

func TestBreakerTripsAfterConsecutiveFailures(t *testing.T) {
	t.Parallel()
	s, rec, logs := newSet(t, quick)
	key := breaker.GitHubWrite
	for range 4 {
		call(t, s, key, breaker.Failure)
	}
	if st := s.State(key); st != breaker.StateClosed {
		t.Fatalf("after 4 failures the breaker is %s, want closed", st)
	}
	call(t, s, key, breaker.Failure)
	open := refused(t, s, key, breaker.StateOpen)
	if open.Wait <= 0 || open.Wait > quick.OpenFor {
		t.Errorf("wait = %s, want the time left of a %s open period", open.Wait, quick.OpenFor)
	}
	if !strings.Contains(open.Error(), "github/write is open") || !strings.Contains(open.Error(), "nothing was sent") {
		t.Errorf("error = %q", open.Error())
	}
	if got := rec.path(key); got != "closed→open" {
		t.Errorf("transitions = %q, want closed→open", got)
	}
	if !strings.Contains(logs.String(), `"breaker":"github/write"`) || !strings.Contains(logs.String(), `"to":"open"`) {
		t.Errorf("no log line for the opening: %s", logs.String())
	}
	// Other keys are other breakers.
	call(t, s, breaker.GitHubRead, breaker.Success)
}

func TestBreakerTripsOnTheFailureRatio(t *testing.T) {
	t.Parallel()
	s, rec, _ := newSet(t, quick)
	key := breaker.Model("openai")
	// Failures never run five in a row, but half of ten calls fail.
	for i := range 9 {
		o := breaker.Success
		if i%2 == 1 || i == 8 {
			o = breaker.Failure
		}
		call(t, s, key, o)
	}
	if st := s.State(key); st != breaker.StateClosed {
		t.Fatalf("after 9 calls (5 failed) the breaker is %s: the ratio needs 10 calls", st)
	}
	call(t, s, key, breaker.Success)
	if st := s.State(key); st != breaker.StateClosed {
		t.Fatalf("5 failures of 10 calls (the last a success) left the breaker %s; the ratio is judged on a failure", st)
	}
	call(t, s, key, breaker.Failure) // 6 of 11
	refused(t, s, key, breaker.StateOpen)
	if got := rec.path(key); got != "closed→open" {
		t.Errorf("transitions = %q", got)
	}
}

func TestBreakerSuccessesResetTheRunAndIgnoredCallsCountNothing(t *testing.T) {
	t.Parallel()
	s, _, _ := newSet(t, quick)
	key := breaker.SlackPost
	for range 4 {
		call(t, s, key, breaker.Failure)
	}
	call(t, s, key, breaker.Success) // a 4xx: the service answered
	for range 4 {
		call(t, s, key, breaker.Failure)
	}
	for range 20 {
		call(t, s, key, breaker.Ignored) // cancelled calls neither trip nor reset
	}
	if st := s.State(key); st != breaker.StateClosed {
		t.Fatalf("breaker %s after 4+4 failures split by a success, want closed", st)
	}
	call(t, s, key, breaker.Failure) // fifth in a row: the ignored calls did not reset it
	refused(t, s, key, breaker.StateOpen)
}

func TestBreakerLetsOneProbeThroughAfterTheOpenPeriod(t *testing.T) {
	t.Parallel()
	s, rec, _ := newSet(t, quick)
	key := breaker.GitHubWrite
	for range 5 {
		call(t, s, key, breaker.Failure)
	}
	open := refused(t, s, key, breaker.StateOpen)

	// The breaker says how long: after that, one probe goes through.
	<-time.After(open.Wait)
	probe, err := s.Allow(key)
	if err != nil {
		t.Fatalf("after the open period: %v, want the probe let through", err)
	}
	second := refused(t, s, key, breaker.StateHalfOpen)
	if second.Wait <= 0 || second.Wait > quick.OpenFor {
		t.Errorf("half-open wait = %s", second.Wait)
	}
	probe.Done(breaker.Failure) // still down: open again, for a full period
	again := refused(t, s, key, breaker.StateOpen)
	if again.Wait < quick.OpenFor-50*time.Millisecond {
		t.Errorf("reopened with %s left, want a fresh %s period", again.Wait, quick.OpenFor)
	}

	<-time.After(again.Wait)
	probe, err = s.Allow(key)
	if err != nil {
		t.Fatalf("second probe: %v", err)
	}
	probe.Done(breaker.Success)
	probe.Done(breaker.Failure) // only the first report counts
	if st := s.State(key); st != breaker.StateClosed {
		t.Fatalf("after a successful probe the breaker is %s, want closed", st)
	}
	call(t, s, key, breaker.Success)
	if got, want := rec.path(key), "closed→open open→half-open half-open→open open→half-open half-open→closed"; got != want {
		t.Errorf("transitions = %q, want %q", got, want)
	}
}

func TestBreakerProbeThatProvesNothingFreesTheProbe(t *testing.T) {
	t.Parallel()
	s, _, _ := newSet(t, quick)
	key := breaker.GitHubRead
	for range 5 {
		call(t, s, key, breaker.Failure)
	}
	<-time.After(refused(t, s, key, breaker.StateOpen).Wait)
	probe, err := s.Allow(key)
	if err != nil {
		t.Fatal(err)
	}
	probe.Done(breaker.Ignored) // cancelled before it was sent
	if _, err := s.Allow(key); err != nil {
		t.Fatalf("after an ignored probe: %v, want another probe let through", err)
	}
}

func TestNilSetAllowsEverything(t *testing.T) {
	t.Parallel()
	var s *breaker.Set
	for range 100 {
		p, err := s.Allow(breaker.GitHubWrite)
		if err != nil {
			t.Fatal(err)
		}
		p.Done(breaker.Failure)
	}
	if s.State(breaker.GitHubWrite) != breaker.StateClosed || s.Keys() != nil {
		t.Error("a nil set reports a breaker")
	}
}

func TestSettingsAreValidated(t *testing.T) {
	t.Parallel()
	if err := config.DefaultBreakerSettings.Validate(); err != nil {
		t.Fatalf("default settings: %v", err)
	}
	for _, bad := range []config.BreakerSettings{
		{ConsecutiveFailures: 0, FailureRatio: 0.5, MinCalls: 10, Window: time.Minute, OpenFor: time.Second},
		{ConsecutiveFailures: 5, FailureRatio: 1.5, MinCalls: 10, Window: time.Minute, OpenFor: time.Second},
		{ConsecutiveFailures: 5, FailureRatio: 0.5, MinCalls: 0, Window: time.Minute, OpenFor: time.Second},
		{ConsecutiveFailures: 5, FailureRatio: 0.5, MinCalls: 10, Window: 0, OpenFor: time.Second},
		{ConsecutiveFailures: 5, FailureRatio: 0.5, MinCalls: 10, Window: time.Minute, OpenFor: 0},
	} {
		if _, err := breaker.NewSet(bad, breaker.Options{}); err == nil {
			t.Errorf("NewSet(%+v) accepted", bad)
		}
	}
}

// TestBreakerLetsOneTrialCallThroughAfterAFailure: once a call has failed,
// a closed breaker lets one call through at a time until one is answered,
// so the calls sent to a dependency that has just gone down stop at what
// was already in flight.
func TestBreakerLetsOneTrialCallThroughAfterAFailure(t *testing.T) {
	t.Parallel()
	s, _, _ := newSet(t, quick)
	key := breaker.Model("openai")
	call(t, s, key, breaker.Success) // the dependency has answered once

	// Healthy: calls go through side by side.
	a, errA := s.Allow(key)
	b, errB := s.Allow(key)
	if errA != nil || errB != nil {
		t.Fatalf("healthy breaker refused a concurrent call: %v, %v", errA, errB)
	}
	a.Done(breaker.Failure) // the dependency went down; b is still out
	trial, err := s.Allow(key)
	if err != nil {
		t.Fatalf("after one failure the trial call was refused: %v", err)
	}
	open := refused(t, s, key, breaker.StateClosed)
	if open.Wait <= 0 || open.Wait > time.Second {
		t.Errorf("wait while the trial is out = %s, want at most a second", open.Wait)
	}
	if !strings.Contains(open.Error(), "one call through at a time") {
		t.Errorf("error = %q", open.Error())
	}
	b.Done(breaker.Failure) // an earlier call comes back: the trial still holds the slot
	refused(t, s, key, breaker.StateClosed)
	trial.Done(breaker.Failure)

	// The next trial, and so on: one at a time up to the threshold.
	call(t, s, key, breaker.Failure) // the fourth failure in a row
	next, err := s.Allow(key)
	if err != nil {
		t.Fatalf("trial after the fourth failure refused: %v", err)
	}
	refused(t, s, key, breaker.StateClosed)
	next.Done(breaker.Failure) // the fifth: the breaker opens
	refused(t, s, key, breaker.StateOpen)
}

func TestBreakerTrialFreesItsSlotWhenAnsweredOrIgnored(t *testing.T) {
	t.Parallel()
	s, _, _ := newSet(t, quick)
	key := breaker.GitHubWrite
	call(t, s, key, breaker.Success)
	call(t, s, key, breaker.Failure)

	// A trial whose dependency has begun to answer frees the slot at once;
	// its own judgement still comes with Done.
	streaming, err := s.Allow(key)
	if err != nil {
		t.Fatal(err)
	}
	refused(t, s, key, breaker.StateClosed)
	streaming.Answered()
	second, err := s.Allow(key)
	if err != nil {
		t.Fatalf("slot not freed by Answered: %v", err)
	}
	// A trial that proves nothing frees the slot and leaves the run of
	// failures as it was: the next call is a trial too.
	second.Done(breaker.Ignored)
	third, err := s.Allow(key)
	if err != nil {
		t.Fatalf("slot not freed by an ignored trial: %v", err)
	}
	refused(t, s, key, breaker.StateClosed)

	// A success ends the trials: calls go side by side again.
	streaming.Done(breaker.Success)
	third.Done(breaker.Success)
	x, errX := s.Allow(key)
	y, errY := s.Allow(key)
	if errX != nil || errY != nil {
		t.Fatalf("after a success the breaker still takes one call at a time: %v, %v", errX, errY)
	}
	x.Done(breaker.Success)
	y.Done(breaker.Success)
}

// TestBreakerBoundsCallsToADownedDependency: three calls are out when the
// dependency goes down; the first comes back failed while 64 callers keep
// asking. From then on calls go one at a time, so exactly threshold-1 more
// reach the dependency before the breaker opens, however many callers ask
// together (without the trial slot, all 64 of the first round would).
func TestBreakerBoundsCallsToADownedDependency(t *testing.T) {
	t.Parallel()
	const threshold = 5
	s, _, _ := newSet(t, config.BreakerSettings{ConsecutiveFailures: threshold, FailureRatio: 0.5, MinCalls: 100, Window: time.Minute, OpenFor: time.Hour})
	key := breaker.Model("openai")
	call(t, s, key, breaker.Success) // the dependency has answered once
	var out []*breaker.Permit
	for range 3 {
		p, err := s.Allow(key)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	out[0].Done(breaker.Failure)

	// In each round the calls let through are in flight together.
	sent := rounds(s, key, 8, breaker.Failure)
	if sent != threshold-1 {
		t.Errorf("after the first failure the dependency received %d more calls, want %d (one at a time up to the threshold)", sent, threshold-1)
	}
	if st := s.State(key); st != breaker.StateOpen {
		t.Errorf("breaker is %s, want open", st)
	}
	out[1].Done(breaker.Failure) // late answers of an older generation change nothing
	out[2].Done(breaker.Failure)
	refused(t, s, key, breaker.StateOpen)
}

// TestBreakerStartsWithOneCallAtATime: a breaker that has never had an
// answer from its dependency lets one call through at a time, so a worker
// that starts while the dependency is down sends it exactly the threshold
// however many callers ask at once; once a call is answered, calls go side
// by side.
func TestBreakerStartsWithOneCallAtATime(t *testing.T) {
	t.Parallel()
	const threshold = 5
	settings := config.BreakerSettings{ConsecutiveFailures: threshold, FailureRatio: 0.5, MinCalls: 100, Window: time.Minute, OpenFor: time.Hour}

	down, _, _ := newSet(t, settings)
	key := breaker.Model("openai")
	if sent := rounds(down, key, 8, breaker.Failure); sent != threshold {
		t.Errorf("a dependency down from the start received %d calls from 64 callers, want %d", sent, threshold)
	}
	refused(t, down, key, breaker.StateOpen)

	up, _, _ := newSet(t, settings)
	first, err := up.Allow(key)
	if err != nil {
		t.Fatal(err)
	}
	open := refused(t, up, key, breaker.StateClosed)
	if open.Wait <= 0 || open.Wait > 250*time.Millisecond {
		t.Errorf("wait behind the first call = %s, want at most 250ms", open.Wait)
	}
	first.Answered() // its headers came: the dependency is up
	if sent := rounds(up, key, 1, breaker.Success); sent != 64 {
		t.Errorf("after the first answer %d of 64 callers were let through at once, want all", sent)
	}
	first.Done(breaker.Success)
}

// rounds runs n rounds in which 64 callers ask key's breaker at once; the
// calls let through end with o only after every caller of the round has
// asked, so they are in flight together. It returns the calls let through.
func rounds(s *breaker.Set, key breaker.Key, n int, o breaker.Outcome) int {
	sent := 0
	for range n {
		permits := make(chan *breaker.Permit, 64)
		var asked sync.WaitGroup
		for range 64 {
			asked.Add(1)
			go func() {
				defer asked.Done()
				if p, err := s.Allow(key); err == nil {
					permits <- p
				}
			}()
		}
		asked.Wait()
		close(permits)
		for p := range permits {
			sent++
			p.Done(o)
		}
	}
	return sent
}

func TestConfiguredKeyHasItsOwnThresholds(t *testing.T) {
	t.Parallel()
	s, _, _ := newSet(t, quick)
	own := quick
	own.ConsecutiveFailures, own.OpenFor = 2, time.Hour
	key := breaker.Key("mcp/tickets")
	if err := s.Configure(key, own); err != nil {
		t.Fatal(err)
	}
	call(t, s, key, breaker.Failure)
	call(t, s, key, breaker.Failure)
	if open := refused(t, s, key, breaker.StateOpen); open.Wait <= quick.OpenFor {
		t.Errorf("wait %s: the key's own open period (1h) was not used", open.Wait)
	}
	// Other keys keep the Set's thresholds.
	call(t, s, breaker.GitHubWrite, breaker.Failure)
	call(t, s, breaker.GitHubWrite, breaker.Failure)
	if st := s.State(breaker.GitHubWrite); st != breaker.StateClosed {
		t.Errorf("github/write is %s after 2 failures, want closed", st)
	}
	if err := s.Configure(key, own); err == nil {
		t.Error("configuring a key in use was accepted")
	}
	bad := own
	bad.FailureRatio = 3
	if err := s.Configure("mcp/other", bad); err == nil {
		t.Error("bad settings were accepted")
	}
}
