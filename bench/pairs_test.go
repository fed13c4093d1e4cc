package main

import (
	"math"
	"testing"
)

func TestPairInterval(t *testing.T) {
	near := func(got, want float64) bool { return math.Abs(got-want) < 0.001 }
	// Two pairs: logs -0.2231 and 0, standard error 0.1116, t(1) = 12.706.
	gm, lo, hi := pairInterval([]float64{0.8, 1.0})
	if !near(gm, 0.8944) || !near(lo, 0.2167) || !near(hi, 3.692) {
		t.Errorf("pairInterval(0.8, 1.0) = %.4f (%.4f–%.4f), want 0.8944 (0.2167–3.692)", gm, lo, hi)
	}
	// Pairs that agree leave no doubt.
	if gm, lo, hi := pairInterval([]float64{0.9, 0.9, 0.9}); !near(gm, 0.9) || !near(lo, 0.9) || !near(hi, 0.9) {
		t.Errorf("pairInterval(0.9 ×3) = %.4f (%.4f–%.4f), want 0.9 throughout", gm, lo, hi)
	}
	// More pairs of the same spread narrow it.
	_, lo4, hi4 := pairInterval([]float64{0.8, 1.0, 0.8, 1.0})
	if !(lo4 > lo && hi4 < hi) {
		t.Errorf("four pairs gave %.3f–%.3f, no narrower than two's %.3f–%.3f", lo4, hi4, lo, hi)
	}
	if studentT95(7) != 2.365 || studentT95(100) != 1.96 {
		t.Errorf("studentT95(7) = %v, studentT95(100) = %v", studentT95(7), studentT95(100))
	}
}
