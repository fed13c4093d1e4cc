package backoff_test

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/backoff"
)

func TestSpanGrowsToItsCap(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    backoff.Policy
		n    int
		want time.Duration
	}{
		{"first retry is the base", backoff.Policy{Base: 500 * time.Millisecond, Cap: 10 * time.Second}, 1, 500 * time.Millisecond},
		{"doubles by default", backoff.Policy{Base: 500 * time.Millisecond, Cap: 10 * time.Second}, 4, 4 * time.Second},
		{"stops at the cap", backoff.Policy{Base: 500 * time.Millisecond, Cap: 10 * time.Second}, 6, 10 * time.Second},
		{"a retry count below 1 is the first", backoff.Policy{Base: time.Second, Cap: time.Minute}, 0, time.Second},
		{"its own multiplier", backoff.Policy{Base: time.Second, Cap: time.Minute, Multiplier: 3}, 3, 9 * time.Second},
		{"multiplier 1 is constant", backoff.Policy{Base: time.Second, Multiplier: 1}, 50, time.Second},
		{"no cap and no overflow", backoff.Policy{Base: time.Second}, 200, math.MaxInt64},
		{"a huge retry count stays at the cap", backoff.Policy{Base: time.Second, Cap: time.Hour}, math.MaxInt, time.Hour},
		{"no base, no span", backoff.Policy{Cap: time.Hour}, 3, 0},
	} {
		if got := tc.p.Span(tc.n); got != tc.want {
			t.Errorf("%s: %+v.Span(%d) = %s, want %s", tc.name, tc.p, tc.n, got, tc.want)
		}
	}
}

func TestDelay(t *testing.T) {
	t.Parallel()
	exp := backoff.Policy{Base: 2 * time.Second, Cap: 30 * time.Second}
	for _, tc := range []struct {
		name  string
		p     backoff.Policy
		n     int
		floor time.Duration
		r     float64
		want  time.Duration
	}{
		{"full jitter: a draw of 0 waits nothing", exp, 1, 0, 0, 0},
		{"full jitter: halfway through the first span", exp, 1, 0, 0.5, time.Second},
		{"full jitter: halfway through the third span", exp, 3, 0, 0.5, 4 * time.Second},
		{"full jitter: capped", exp, 10, 0, 0.5, 15 * time.Second},
		{"a draw of 1 reaches the span's end", exp, 2, 0, 1, 4 * time.Second},
		{"a draw above 1 counts as 1", exp, 2, 0, 7, 4 * time.Second},
		{"a negative draw counts as 0", exp, 2, 0, -1, 0},
		{"a NaN draw counts as 0", exp, 2, 0, math.NaN(), 0},
		{"a floor is waited whole", exp, 1, 10 * time.Second, 0, 10 * time.Second},
		{"jitter comes on top of the floor", exp, 1, 10 * time.Second, 0.5, 11 * time.Second},
		{"a long floor widens the span to a fifth of it", exp, 1, 100 * time.Second, 0.5, 110 * time.Second},
		{"…still within the cap", exp, 1, time.Hour, 0.5, time.Hour + 15*time.Second},
		{"a negative floor is none", exp, 1, -time.Second, 0.5, time.Second},
		{"named wait: spread a fifth", backoff.AfterWait, 1, 10 * time.Second, 0.5, 11 * time.Second},
		{"named wait: spread at least 200 ms", backoff.AfterWait, 1, time.Second, 0.5, time.Second + 100*time.Millisecond},
		{"named wait: spread at most 5 s", backoff.AfterWait, 1, time.Hour, 0.5, time.Hour + 2500*time.Millisecond},
		{"named wait already over: just the spread", backoff.AfterWait, 1, -time.Second, 0.5, 100 * time.Millisecond},
		{"no overflow", exp, 1, math.MaxInt64 - time.Second, 1, math.MaxInt64},
	} {
		if got := tc.p.Delay(tc.n, tc.floor, tc.r); got != tc.want {
			t.Errorf("%s: %+v.Delay(%d, %s, %g) = %s, want %s", tc.name, tc.p, tc.n, tc.floor, tc.r, got, tc.want)
		}
	}
}

// For any draw, a delay lies in [floor, floor+span], and the same draw gives
// the same delay: a seeded source repeats its delays exactly.
func TestDelayBoundsAndDeterminism(t *testing.T) {
	t.Parallel()
	p := backoff.Policy{Base: 500 * time.Millisecond, Cap: 10 * time.Second}
	draws := func(seed uint64) []time.Duration {
		rng := rand.New(rand.NewPCG(seed, 1))
		var out []time.Duration
		for n := 1; n <= 12; n++ {
			for _, floor := range []time.Duration{0, 3 * time.Second, time.Minute} {
				d := p.Delay(n, floor, rng.Float64())
				span := min(max(p.Span(n), floor/5), p.Cap)
				if d < floor || d > floor+span {
					t.Fatalf("Delay(%d, %s) = %s, outside [%s, %s]", n, floor, d, floor, floor+span)
				}
				out = append(out, d)
			}
		}
		return out
	}
	a, b, c := draws(42), draws(42), draws(43)
	same := true
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("delay %d: %s then %s from the same seed", i, a[i], b[i])
		}
		same = same && a[i] == c[i]
	}
	if same {
		t.Fatal("two seeds drew the same delays: the draw is not used")
	}
}

// The formulas Delay replaced, as they were written, for the workflow's
// recorded histories: the turn guard's full jitter and the breaker's
// JitterAfter, both fed by workflow.SideEffect draws. Delay must give the
// same durations for every draw, to the nanosecond, so a replayed task
// sleeps exactly what it recorded.
func guardDelayBefore(base, cap time.Duration, n int, jitter float64) time.Duration {
	d := base
	for i := 1; i < n && d < cap; i++ {
		d *= 2
	}
	d = min(d, cap)
	return time.Duration(jitter * float64(d))
}

func jitterAfterBefore(wait time.Duration, r float64) time.Duration {
	wait = max(wait, 0)
	spread := min(max(wait/5, 200*time.Millisecond), 5*time.Second)
	return wait + time.Duration(r*float64(spread))
}

func equalJitterBefore(initial, maximum time.Duration, coefficient float64, attempt int32, r float64) time.Duration {
	d := time.Duration(min(float64(initial)*math.Pow(coefficient, float64(attempt-1)), float64(maximum)))
	return d/2 + time.Duration(r*float64(d/2))
}

func TestDelayMatchesTheFormulasItReplaced(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 7))
	guards := []backoff.Policy{
		{Base: 500 * time.Millisecond, Cap: 10 * time.Second},
		{Base: 2 * time.Second, Cap: 30 * time.Second},
		{Base: 2 * time.Second, Cap: 5 * time.Minute},
	}
	for i := 0; i < 20000; i++ {
		r := rng.Float64()
		n := 1 + rng.IntN(40)
		g := guards[i%len(guards)]
		if got, want := g.Delay(n, 0, r), guardDelayBefore(g.Base, g.Cap, n, r); got != want {
			t.Fatalf("guard %+v retry %d, draw %v: %s, before %s", g, n, r, got, want)
		}
		wait := time.Duration(rng.Int64N(int64(time.Hour))) - time.Minute
		if got, want := backoff.AfterWait.Delay(1, wait, r), jitterAfterBefore(wait, r); got != want {
			t.Fatalf("wait %s, draw %v: %s, before %s", wait, r, got, want)
		}
		initial := time.Duration(1+rng.IntN(3000)) * time.Millisecond
		maximum := 100 * initial
		coefficient := 1 + rng.Float64()*2
		attempt := int32(1 + rng.IntN(12))
		half := backoff.Policy{Base: initial, Cap: maximum, Multiplier: coefficient}.Span(int(attempt)) / 2
		if got, want := (backoff.Policy{Base: half, Cap: half}).Delay(1, half, r), equalJitterBefore(initial, maximum, coefficient, attempt, r); got != want {
			t.Fatalf("equal jitter of %s×%g^%d (max %s), draw %v: %s, before %s", initial, coefficient, attempt-1, maximum, r, got, want)
		}
	}
}

// Sleep returns at once with the context's error when it ends first, and
// nil after the wait otherwise.
func TestSleep(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := backoff.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on an ended context = %v, want context.Canceled", err)
	}
	if err := backoff.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep(1ms) = %v, want nil", err)
	}
}
