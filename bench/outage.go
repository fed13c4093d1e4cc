package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/workflows"
)

// The outage: the model provider answers every request with 503 for
// outageLength while outageTasks demo tasks run on a pool of outageWorkers,
// then recovers. What it receives while down is what a pool sends to a
// downed dependency; with breakers (docs/design.md §7) that should be about
// the trip threshold plus one half-open probe per open period per worker.
const (
	outageLength  = 20 * time.Second
	outageTasks   = 50
	outageWorkers = 2
	// outageSettle bounds the wait for the tasks once the provider is back.
	outageSettle = 3 * time.Minute
)

// outageLengthRun and outageTasksRun are this run's (-quick shortens them).
var (
	outageLengthRun = outageLength
	outageTasksRun  = outageTasks
)

// outageRow is one outage, with breakers on or off.
type outageRow struct {
	breakers    bool
	notBuilt    bool  // breakers on was asked for and this capstan has none
	requests    int64 // to the model provider while it was down
	perSecond   []int64
	completed   int
	failed      int
	failures    map[string]int // failure code → tasks
	recoveredIn time.Duration  // from the provider's return to the last task's end
	// bound is, with breakers on, what the design allows the provider to
	// receive while down: per worker, the trip threshold plus one probe per
	// open period (docs/design.md §7).
	bound int64
	err   error
}

// downedModel makes the sandbox model answer 503 while down is set, and
// counts those requests, second by second from start.
type downedModel struct {
	down      atomic.Bool
	start     time.Time
	mu        sync.Mutex
	perSecond []int64
}

func (d *downedModel) fault(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
	if !d.down.Load() {
		return false
	}
	d.mu.Lock()
	sec := int(time.Since(d.start) / time.Second)
	for len(d.perSecond) <= sec {
		d.perSecond = append(d.perSecond, 0)
	}
	d.perSecond[sec]++
	d.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write([]byte(`{"error":{"message":"The server is overloaded or not ready yet.","type":"server_error","param":null,"code":null}}` + "\n"))
	return true
}

// total returns the requests while down, in all and second by second over
// the whole outage (seconds without a request count zero).
func (d *downedModel) total() (n int64, perSecond []int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	perSecond = make([]int64, max(len(d.perSecond), int(outageLengthRun/time.Second)))
	copy(perSecond, d.perSecond)
	for _, c := range perSecond {
		n += c
	}
	return n, perSecond
}

// runOutage runs the outage with breakers on or off.
func (e *env) runOutage(ctx context.Context, breakers bool) outageRow {
	row := outageRow{breakers: breakers, failures: map[string]int{}}
	if breakers && !breakersBuilt {
		row.notBuilt = true
		return row
	}
	if breakers {
		s := config.FromEnv(func(string) string { return "" }).Breakers
		periods := int64(math.Ceil(outageLengthRun.Seconds() / s.OpenFor.Seconds()))
		row.bound = outageWorkers * (int64(s.ConsecutiveFailures) + periods)
	}
	queue := e.next(fmt.Sprintf("bench-outage-breakers-%t", breakers))
	p, err := e.startCapstan(ctx, queue, capstanOptions{workers: outageWorkers, breakers: breakers,
		ledgerDSN: "sqlite://" + filepath.Join(e.dir, queue+".db")})
	if err != nil {
		row.err = err
		return row
	}
	defer p.stop()

	d := &downedModel{start: time.Now()}
	d.down.Store(true)
	e.sandbox.Model.SetFault(d.fault)
	defer e.sandbox.Model.SetFault(nil)

	start := e.capstanStarter(queue, e.next("outage"))
	runs := make([]client.WorkflowRun, 0, outageTasksRun)
	for i := range outageTasksRun {
		run, err := start(ctx, i)
		if err != nil {
			row.err = err
			return row
		}
		runs = append(runs, run)
	}
	// The outage lasts a fixed time: it is the experiment's parameter.
	select {
	case <-time.After(outageLengthRun - time.Since(d.start)):
	case <-ctx.Done():
		row.err = ctx.Err()
		return row
	}
	d.down.Store(false)
	back := time.Now()
	row.requests, row.perSecond = d.total()
	progress("outage  breakers=%-5t: the provider received %d requests in %s; waiting for the %d tasks",
		breakers, row.requests, outageLengthRun, outageTasksRun)

	sctx, cancel := context.WithTimeout(ctx, outageSettle)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	for _, run := range runs {
		wg.Go(func() {
			var res workflows.TaskResult
			err := run.Get(sctx, &res)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && res.Status == workflows.StatusCompleted:
				row.completed++
			default:
				row.failed++
				row.failures[failureCode(err)]++
			}
		})
	}
	wg.Wait()
	row.recoveredIn = time.Since(back)
	progress("outage  breakers=%-5t: %d completed, %d failed %v, %s after the provider came back",
		breakers, row.completed, row.failed, row.failures, row.recoveredIn.Round(time.Second))
	return row
}

// failureCode is the code a failed task ended with (its application
// error's type), or why it did not end.
func failureCode(err error) string {
	var appErr *temporal.ApplicationError
	switch {
	case err == nil:
		return "not completed"
	case errors.Is(err, context.DeadlineExceeded):
		return "still running"
	case errors.As(err, &appErr):
		return appErr.Type()
	default:
		return "error"
	}
}
