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

func newSet(t *testing.T, s breaker.Settings) (*breaker.Set, *recorder, *bytes.Buffer) {
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

var quick = breaker.Settings{ConsecutiveFailures: 5, FailureRatio: 0.5, MinCalls: 10, Window: time.Minute, OpenFor: 200 * time.Millisecond}

func TestBreakerTripsAfterConsecutiveFailures(t *testing.T) {
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
	if err := breaker.DefaultSettings.Validate(); err != nil {
		t.Fatalf("default settings: %v", err)
	}
	for _, bad := range []breaker.Settings{
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
