package activities

import (
	"context"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/capstanhq/capstan/internal/config"
)

// OperationHeartbeat is the detail of the heartbeats of ExecuteTool and
// Deliver: which operation the attempt is working on and at which step.
type OperationHeartbeat struct {
	OperationID string `json:"operation_id"`
	Step        string `json:"step"` // one of the step* constants
}

// Steps of an operation, as its heartbeats report them.
const (
	stepPreparing = "preparing" // reading the facts to record before the call (tools.Preparer)
	stepCalling   = "calling"   // the external call is in flight
	stepVerifying = "verifying" // reading back what an ambiguous call did
	stepRecording = "recording" // waiting for the ledger to record what the call did
)

// heartbeat records a heartbeat every interval, on its own goroutine,
// whatever the activity is doing meanwhile — a call that hangs without a
// byte still beats, so Temporal's heartbeat timeout notices only a worker
// that is really gone. details is called for each beat's detail; it runs on
// the heartbeat goroutine, so what it reads must be safe to share.
//
// The first beat comes one interval in, not as the activity starts: Temporal
// counts the heartbeat timeout from the attempt's start, and interval is at
// most a third of it (heartbeatInterval), so a worker lost before its first
// beat is still noticed in time — and a call that ends within one interval,
// as most do, costs the server no heartbeat at all.
//
// onBeat, when not nil, runs after each beat, in a context the activity's
// cancellation does not break, bounded by interval: it is where a claim's
// lease is renewed (see renewLease), so the lease lives exactly as long as
// the heartbeats do. The claim's lease was set a moment before the beats
// start and is at least three intervals long, so no renewal is needed
// before the first beat. Its error is logged; the beats go on.
//
// stop ends the beats and returns once no beat is running: after it, details
// and onBeat are never called again. It may be called more than once.
func (a *Activities) heartbeat(ctx context.Context, interval time.Duration, details func() any, onBeat func(context.Context) error) (stop func()) {
	beat := func() {
		activity.RecordHeartbeat(ctx, details())
		if onBeat == nil {
			return
		}
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), interval)
		defer cancel()
		if err := onBeat(bctx); err != nil {
			a.Logger.WarnContext(ctx, "heartbeat: lease renewal failed", "error", err, "activity", activity.GetInfo(ctx).ActivityType.Name)
		}
	}
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				beat()
			case <-quit:
				return
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-exited
		})
	}
}

// heartbeatInterval is how often an operation's attempt beats: three beats
// in the activity's heartbeat timeout, so one lost beat never looks like a
// lost worker, and three in the claim's lease, so renewals keep it alive.
// An activity without a heartbeat timeout beats at the default rate.
func (a *Activities) heartbeatInterval(ctx context.Context) time.Duration {
	timeout := activity.GetInfo(ctx).HeartbeatTimeout
	if timeout <= 0 {
		timeout = config.DefaultHeartbeatTimeout
	}
	return max(min(timeout, a.lease(ctx))/3, time.Millisecond)
}

// lease is how long a claim of this attempt lives without a renewal: the
// activity's heartbeat timeout when it has one, so a dead worker's claim
// runs out when Temporal declares the worker lost and its successor can
// reconcile at once; otherwise Deps.Lease.
func (a *Activities) lease(ctx context.Context) time.Duration {
	if activity.IsActivity(ctx) {
		if hb := activity.GetInfo(ctx).HeartbeatTimeout; hb > 0 {
			return hb
		}
	}
	return a.Lease
}

// renewLease keeps the claim of operation id under fence alive while its
// attempt beats: heartbeat runs it after every beat, so the lease ends at
// most one lease after the last beat of a worker that died, and its
// successor reconciles then instead of waiting out a long lease. A renewal
// the ledger refuses (the lease ran out, a reconciler took the operation)
// is logged by heartbeat; the attempt's own writes then meet the fence.
func (a *Activities) renewLease(ctx context.Context, id string, fence int64) func(context.Context) error {
	lease := a.lease(ctx)
	return func(ctx context.Context) error { return a.Ledger.Renew(ctx, id, fence, lease) }
}
