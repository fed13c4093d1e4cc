package main

import (
	"fmt"
	"math"
	"slices"
)

// Rounds of capstan and bare alternate, so round i of each ran back to
// back: a pair. One pair's ratio moves far on a shared machine; these say
// how far, and how sure a run's figure is.

// roundPairs are a cell's rounds beside their pairs: capstan's round i and
// bare's, run back to back.
func roundPairs(cs, bs *loadStats) [][2]round {
	var pairs [][2]round
	for i := range min(len(cs.rounds), len(bs.rounds)) {
		pairs = append(pairs, [2]round{cs.rounds[i], bs.rounds[i]})
	}
	return pairs
}

// pairSpread is the lowest and highest ratio of one capstan round to the
// bare round run beside it, by f over each round alone: how far one run's
// ratio moves on this machine, which a single figure hides, with the
// pairs' geometric mean and its interval. Empty with fewer than two pairs.
func (r *results) pairSpread(workers, n int, f func(*loadStats) float64) string {
	cs, bs := r.cell(kindCapstan, workers, n), r.cell(kindBare, workers, n)
	if cs == nil || bs == nil {
		return ""
	}
	var ratios []float64
	for _, pr := range roundPairs(cs, bs) {
		c := &loadStats{loadKey: cs.loadKey, rounds: pr[:1]}
		b := &loadStats{loadKey: bs.loadKey, rounds: pr[1:]}
		if len(c.latencies()) == 0 || len(b.latencies()) == 0 || f(b) == 0 {
			continue
		}
		ratios = append(ratios, f(c)/f(b))
	}
	if len(ratios) < 2 {
		return ""
	}
	gm, lo, hi := pairInterval(ratios)
	return fmt.Sprintf("round pairs %.2f–%.2f×, their geometric mean %.2f× (95 %% interval %.2f–%.2f×)",
		slices.Min(ratios), slices.Max(ratios), gm, lo, hi)
}

// pairInterval is the geometric mean of the pairs' ratios and a 95 %
// interval for it (Student's t over their logarithms). It says how far the
// run's figure could be from what many more rounds would show, on the
// assumption that pairs vary independently; the rounds' alternating order
// (capstan first, then bare first) keeps a steady drift of the machine out
// of it. At least two ratios, all above zero.
func pairInterval(ratios []float64) (gm, lo, hi float64) {
	n := float64(len(ratios))
	var sum float64
	for _, r := range ratios {
		sum += math.Log(r)
	}
	mean := sum / n
	var ss float64
	for _, r := range ratios {
		ss += (math.Log(r) - mean) * (math.Log(r) - mean)
	}
	half := studentT95(len(ratios)-1) * math.Sqrt(ss/(n-1)/n)
	return math.Exp(mean), math.Exp(mean - half), math.Exp(mean + half)
}

// studentT95 is the two-sided 95 % quantile of Student's t with df degrees
// of freedom (1.96 past 30).
func studentT95(df int) float64 {
	t := []float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
		2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
		2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}
	if df >= 1 && df <= len(t) {
		return t[df-1]
	}
	return 1.96
}
