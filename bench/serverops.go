package main

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// What a task asks of the Temporal server, counted by the server itself.
// The dev server's CPU per task reads higher in capstan's rounds than in
// bare's, yet both task shapes make the same calls (rpcs.go) and their
// histories differ by two events. The server's own count of its
// persistence requests, read from its /metrics before and after each round,
// says whether capstan's tasks make it do more work or the same work at a
// higher price: every history append, mutable-state update, task-queue
// write, timer and visibility record is one of them.

// serverOpsMetric is the dev server's counter of persistence requests, by
// operation (and by namespace and service, which are summed).
const serverOpsMetric = "persistence_requests"

// serverOps is a count of persistence requests by operation.
type serverOps map[string]float64

// readServerOps reads the server's persistence requests so far from its
// Prometheus endpoint. A round's are the difference of two reads, taken
// outside the round's CPU window: rendering /metrics is work of its own.
func readServerOps(ctx context.Context, url string) (serverOps, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the dev server's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the dev server's metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("parse the dev server's metrics: %w", err)
	}
	ops := serverOps{}
	f := families[serverOpsMetric]
	if f == nil {
		return ops, nil
	}
	for _, m := range f.GetMetric() {
		op := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "operation" {
				op = l.GetValue()
			}
		}
		v := m.GetCounter().GetValue()
		if m.GetCounter() == nil {
			v = m.GetUntyped().GetValue()
		}
		ops[op] += v
	}
	return ops, nil
}

// withServerOps runs a round and reads the server's persistence requests
// before and after it, into the round's serverOps. A failed read is one
// progress line and leaves them nil: the round still counts, the table
// averages over the rounds that were read.
func (e *env) withServerOps(ctx context.Context, run func() round) round {
	before, err := readServerOps(ctx, e.serverMetrics)
	r := run()
	if err == nil {
		var after serverOps
		if after, err = readServerOps(ctx, e.serverMetrics); err == nil {
			r.serverOps = after.since(before)
		}
	}
	if err != nil {
		progress("  the server's persistence requests were not read: %v", err)
	}
	return r
}

// since is ops minus before, operation by operation.
func (ops serverOps) since(before serverOps) serverOps {
	d := serverOps{}
	for op, v := range ops {
		if x := v - before[op]; x != 0 {
			d[op] = x
		}
	}
	return d
}

// add adds other into ops.
func (ops serverOps) add(other serverOps) {
	for op, v := range other {
		ops[op] += v
	}
}

func (ops serverOps) total() float64 {
	var t float64
	for _, v := range ops {
		t += v
	}
	return t
}

// serverOpsPerTask is the persistence requests of a cell's rounds per task,
// by operation; nil when none was read.
func (s *loadStats) serverOpsPerTask() serverOps {
	sum := serverOps{}
	n := 0
	for _, r := range s.rounds {
		if r.serverOps == nil {
			continue
		}
		sum.add(r.serverOps)
		n += len(r.latencies) + r.failed
	}
	if n == 0 {
		return nil
	}
	for op := range sum {
		sum[op] /= float64(n)
	}
	return sum
}

// serverOpsRows are the operations either kind's tasks asked for at least
// floor times a task on average, most asked first (then by name).
func serverOpsRows(c, b serverOps, floor float64) []string {
	ops := slices.Collect(maps.Keys(c))
	for op := range b {
		if _, ok := c[op]; !ok {
			ops = append(ops, op)
		}
	}
	ops = slices.DeleteFunc(ops, func(op string) bool { return c[op] < floor && b[op] < floor })
	slices.SortFunc(ops, func(x, y string) int {
		if d := max(c[y], b[y]) - max(c[x], b[x]); d != 0 {
			if d > 0 {
				return 1
			}
			return -1
		}
		if x < y {
			return -1
		}
		return 1
	})
	return ops
}

// serverOpsTable is the report's section on what the tasks asked of the
// server at N = 100: its persistence requests per task by operation, for
// capstan and bare, on each pool (the server's CPU per task is in the
// tasks table).
func (r *results) serverOpsTable(p func(string, ...any)) {
	const n = 100
	type pool struct {
		workers int
		c, b    serverOps
	}
	var pools []pool
	for _, workers := range []int{1, 2} {
		c, b := r.cell(kindCapstan, workers, n), r.cell(kindBare, workers, n)
		if c == nil || b == nil {
			continue
		}
		co, bo := c.serverOpsPerTask(), b.serverOpsPerTask()
		if co == nil || bo == nil {
			continue
		}
		pools = append(pools, pool{workers, co, bo})
	}
	if len(pools) == 0 {
		return
	}
	p("")
	p("### What the tasks asked of the server at N = 100")
	p("")
	p("The dev server's own count of its persistence requests (`%s` on its /metrics, read before and after each round), per task, by operation: every history append, mutable-state update, task-queue write, timer and visibility record is one.", serverOpsMetric)
	p("Operations at 0.5 a task or more on either side are listed; the total counts them all.")
	p("")
	header, rule := "| operation |", "| --- |"
	for _, pl := range pools {
		noun := "workers"
		if pl.workers == 1 {
			noun = "worker"
		}
		header += fmt.Sprintf(" %d %s: capstan · bare |", pl.workers, noun)
		rule += " --- |"
	}
	p("%s", header)
	p("%s", rule)
	// Rows in the order of the first pool's figures, so both pools' rows
	// line up.
	for _, op := range serverOpsRows(pools[0].c, pools[0].b, 0.5) {
		row := "| " + op + " |"
		for _, pl := range pools {
			row += fmt.Sprintf(" %.2f · %.2f |", pl.c[op], pl.b[op])
		}
		p("%s", row)
	}
	row := "| **all operations** |"
	for _, pl := range pools {
		row += fmt.Sprintf(" **%.1f · %.1f** (%.2f×) |", pl.c.total(), pl.b.total(), pl.c.total()/pl.b.total())
	}
	p("%s", row)
}
