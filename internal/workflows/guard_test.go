package workflows

import (
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/model"
)

func TestTurnGuard(t *testing.T) {
	t.Parallel()
	t.Run("overload honours Retry-After and gives up after the budget", func(t *testing.T) {
		var g turnGuard
		d := g.decide(attemptOutcome{Outcome: "overloaded", RetryAfter: 3 * time.Second}, noJitter(t))
		if !d.Retry || d.Delay != 3*time.Second {
			t.Fatalf("first overload = %+v, want retry after 3s", d)
		}
		for i := 2; i <= budgetOverload; i++ {
			if d = g.decide(attemptOutcome{Outcome: "overloaded"}, half); !d.Retry {
				t.Fatalf("overload %d = %+v, want retry", i, d)
			}
		}
		if d = g.decide(attemptOutcome{Outcome: "overloaded"}, half); d.Retry || d.Code != FailProviderUnavailable {
			t.Fatalf("overload past budget = %+v, want provider_unavailable", d)
		}
	})
	t.Run("a Retry-After over five minutes fails the turn and says how long", func(t *testing.T) {
		var g turnGuard
		d := g.decide(attemptOutcome{Outcome: "overloaded", RetryAfter: 10 * time.Minute}, noJitter(t))
		if d.Retry || d.Code != FailProviderUnavailable || !strings.Contains(d.Message, "10m0s") {
			t.Fatalf("decision = %+v", d)
		}
	})
	t.Run("an idle cut is retried once, and only a completed attempt clears it", func(t *testing.T) {
		var g turnGuard
		if d := g.decide(attemptOutcome{Outcome: "cut_idle"}, noJitter(t)); !d.Retry || d.Delay != time.Second {
			t.Fatalf("first idle cut = %+v", d)
		}
		g.decide(attemptOutcome{Outcome: "not_sent"}, half)
		if d := g.decide(attemptOutcome{Outcome: "cut_idle"}, noJitter(t)); d.Retry || d.Code != FailModelIdleTimeout {
			t.Fatalf("second idle cut = %+v, want model_idle_timeout", d)
		}
		g.completed()
		if d := g.decide(attemptOutcome{Outcome: "cut_idle"}, noJitter(t)); !d.Retry {
			t.Fatalf("idle cut after a completed attempt = %+v, want retry", d)
		}
	})
	t.Run("rejections and total cuts are never retried", func(t *testing.T) {
		var g turnGuard
		if d := g.decide(attemptOutcome{Outcome: "rejected", HTTPStatus: 401, Message: "bad key"}, noJitter(t)); d.Retry || d.Code != FailProviderRejected || !strings.Contains(d.Message, "HTTP 401") {
			t.Fatalf("rejected = %+v", d)
		}
		if d := g.decide(attemptOutcome{Outcome: "cut_total"}, noJitter(t)); d.Retry || d.Code != FailModelMaxDuration {
			t.Fatalf("cut_total = %+v", d)
		}
	})
	t.Run("an open breaker is waited out, spending no budget", func(t *testing.T) {
		g := turnGuard{breakerWaits: true}
		open := attemptOutcome{Outcome: "breaker_open", RetryAfter: 24 * time.Second, Breaker: "model/openai", Message: "breaker model/openai is open"}
		for i := range 100 { // far past every budget
			d := g.decide(open, half)
			if !d.Retry || !d.BreakerWait || d.Delay != 24*time.Second+2400*time.Millisecond {
				t.Fatalf("breaker_open %d = %+v, want a wait of the 24 s left plus half the jitter spread", i+1, d)
			}
			if !strings.Contains(d.Message, "model/openai") {
				t.Fatalf("message %q does not name the breaker", d.Message)
			}
		}
		if g.transport != 0 || g.overload != 0 || g.idle != 0 || g.invalid != 0 {
			t.Fatalf("budgets after 100 breaker waits = %+v, want untouched", g)
		}
		if d := g.decide(attemptOutcome{Outcome: "overloaded"}, half); !d.Retry || !strings.Contains(d.Message, "overload 1/5") {
			t.Fatalf("first overload after the waits = %+v, want the full overload budget left", d)
		}
	})
	t.Run("before changeWorkflowWaitsOutBreakers, breaker_open has no row", func(t *testing.T) {
		var g turnGuard
		if d := g.decide(attemptOutcome{Outcome: "breaker_open", RetryAfter: time.Second}, noJitter(t)); d.Retry || d.Code != FailProviderUnavailable {
			t.Fatalf("decision = %+v, want provider_unavailable as for any outcome without a row", d)
		}
	})
	t.Run("only outcomes another model may not share allow a fallback", func(t *testing.T) {
		var g turnGuard
		if d := g.decide(attemptOutcome{Outcome: "cut_total"}, noJitter(t)); !d.Fallback {
			t.Errorf("cut_total = %+v, want a fallback allowed", d)
		}
		if d := g.decide(attemptOutcome{Outcome: "overloaded", RetryAfter: time.Hour}, noJitter(t)); !d.Fallback {
			t.Errorf("a Retry-After of an hour = %+v, want a fallback allowed", d)
		}
		for _, o := range []string{"rejected", "cut_idle", "cut_idle", "overflow"} {
			if d := g.decide(attemptOutcome{Outcome: model.Outcome(o)}, noJitter(t)); d.Fallback {
				t.Errorf("%s = %+v, want no fallback", o, d)
			}
		}
	})
	t.Run("persistent overloads: waits capped at 5 min and at the time left, over after 6 h", func(t *testing.T) {
		start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		g := turnGuard{persistent: true}
		if d := g.decide(attemptOutcome{Outcome: "overloaded", RetryAfter: time.Hour, At: start}, noJitter(t)); !d.Retry || d.Delay != 5*time.Minute ||
			!strings.Contains(d.Message, "capped at 5m0s") {
			t.Fatalf("Retry-After 1h = %+v, want a 5 min wait that says it was capped", d)
		}
		if d := g.decide(attemptOutcome{Outcome: "overloaded", At: start.Add(time.Minute)}, func() float64 { return 0.999 }); !d.Retry || d.Delay >= 4*time.Second || d.Delay < 3*time.Second {
			t.Fatalf("the second overload = %+v, want just under 4 s (2 s doubling)", d)
		}
		g.overload = 20 // far past the normal budget
		if d := g.decide(attemptOutcome{Outcome: "overloaded", At: start.Add(time.Hour)}, func() float64 { return 0.999 }); !d.Retry || d.Delay >= 5*time.Minute || d.Delay < 4*time.Minute {
			t.Fatalf("a jittered wait at the cap = %+v, want just under 5 min", d)
		}
		if d := g.decide(attemptOutcome{Outcome: "overloaded", RetryAfter: 4 * time.Minute, At: start.Add(6*time.Hour - time.Minute)}, noJitter(t)); !d.Retry || d.Delay != time.Minute {
			t.Fatalf("a wait past the 6 h = %+v, want the minute left", d)
		}
		if d := g.decide(attemptOutcome{Outcome: "overloaded", At: start.Add(6 * time.Hour)}, noJitter(t)); d.Retry || d.Code != FailProviderUnavailable || !d.Fallback {
			t.Fatalf("at 6 h = %+v, want provider_unavailable, a fallback allowed", d)
		}
		if g.overload != 23 {
			t.Errorf("overload count = %d, want 23", g.overload)
		}
	})
	t.Run("full jitter stays under the cap", func(t *testing.T) {
		if d := overloadBackoff.Delay(10, 0, 0.999); d > overloadBackoff.Cap || d < 29*time.Second {
			t.Fatalf("delay = %s, want just under %s", d, overloadBackoff.Cap)
		}
		if d := transportBackoff.Delay(1, 0, 0); d != 0 {
			t.Fatalf("zero jitter delay = %s, want 0", d)
		}
	})
}

// half is a fixed jitter draw.
func half() float64 { return 0.5 }

// noJitter fails the test if the guard draws jitter where none is due.
func noJitter(t *testing.T) func() float64 {
	return func() float64 {
		t.Helper()
		t.Error("the guard drew jitter for a decision that needs none")
		return 0
	}
}
