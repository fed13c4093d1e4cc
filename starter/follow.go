package main

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/livestream"
	"github.com/capstanhq/capstan/internal/taskstart"
	"github.com/capstanhq/capstan/internal/workflows"
)

// How often the follower asks the workflow what it does. The text itself
// does not wait for this: once an attempt is known, its text streams from
// the worker's hub as the model sends it.
const (
	followPoll   = 250 * time.Millisecond
	followRender = 100 * time.Millisecond
	// resubscribeAfter paces the reconnections of a cut stream.
	resubscribeAfter = 500 * time.Millisecond
	maxResubscribes  = 5
)

func (a *app) followCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "follow TASK_ID",
		Short: "Watch a running task live: the model's text as it streams, retries, operations; then its result",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: a.withTask(func(ctx context.Context, c client.Client, opts client.Options, taskID string) error {
			wid := workflows.WorkflowID(taskID)
			if _, err := describe(ctx, c, wid); err != nil {
				return notFound(err, taskID)
			}
			fmt.Fprintf(a.stdout, "following task %s\n", taskID)
			return a.followLive(ctx, c, wid, a.cfg.WorkflowURL(opts.Namespace, wid))
		}),
	}
}

// followLive shows the task live until it ends, then prints its result; a
// failed or cancelled task is exit status 1.
//
// The workflow says which attempts exist and how they settled (the
// progress query: attempts, retry decisions, operations, journal), and
// the workflow's description which attempt runs now and where its text
// streams (the pending ModelTurn's heartbeat details carry its worker's
// hub URL); the text comes from that hub. So it works for a task on any
// worker of the pool.
func (a *app) followLive(ctx context.Context, c client.Client, wid, ui string) error {
	hc := livestream.FollowerClient(nil, a.cfg.StreamToken, a.cfg.StreamOrigins) // CAPSTAN_STREAM_TOKEN, CAPSTAN_STREAM_ORIGINS
	f := &follower{c: c, wid: wid, http: hc, view: newLiveView(a.stdout, taskIDOf(wid), time.Now)}
	res, err := f.run(ctx)
	if err != nil {
		return err
	}
	writeResult(a.stdout, res, ui, f.view.shownFinal(res.FinalText))
	if res.Status != workflows.StatusCompleted {
		return &taskEndedError{status: res.Status}
	}
	return nil
}

// follower runs one live view.
type follower struct {
	c    client.Client
	wid  string
	http *http.Client
	view *liveView
}

// delta is one event of an attempt's stream.
type delta struct {
	attempt string
	ev      livestream.Event
}

// poll is what one round of questions to the server found.
type poll struct {
	closed  bool
	running []contract.AttemptReport // pending ModelTurn attempts
	// looking says, for each pending Reconcile, what its reconciler looks
	// for and until when (contract.ReconcileProgress.Line).
	looking  []string
	progress workflows.Progress
	ok       bool // progress was answered
}

// run shows the task until it closes and returns its result.
func (f *follower) run(ctx context.Context) (workflows.TaskResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	deltas := make(chan delta, 256)
	polls := make(chan poll)
	go f.poll(ctx, polls)
	subs := map[string]context.CancelFunc{}
	render := time.NewTicker(followRender)
	defer render.Stop()
	v := f.view
	var hubs []string // every hub seen, newest first
	v.lookup = func(id string) bool {
		if len(hubs) == 0 {
			return false
		}
		sctx, scancel := context.WithCancel(ctx)
		subs[id] = scancel
		go f.lookup(sctx, slices.Clone(hubs), id, deltas)
		return true
	}
	for {
		select {
		case d := <-deltas:
			v.text(d.attempt, d.ev)
		case p := <-polls:
			if p.closed {
				return f.finish(ctx, deltas)
			}
			for _, r := range p.running {
				if r.StreamURL != "" && !slices.Contains(hubs, r.StreamURL) {
					hubs = slices.Insert(hubs, 0, r.StreamURL)
				}
				at := v.attempt(r.AttemptID)
				if _, ok := subs[r.AttemptID]; !ok && r.StreamURL != "" && !at.settled {
					sctx, scancel := context.WithCancel(ctx)
					subs[r.AttemptID] = scancel
					at.subscribed = true
					go f.subscribe(sctx, r.StreamURL, r.AttemptID, deltas)
				}
			}
			if p.ok {
				v.apply(p.progress)
			}
			v.looking = p.looking
		case <-render.C:
			v.flushSettled(false)
			v.render()
		case <-ctx.Done():
			v.clear()
			return workflows.TaskResult{}, fmt.Errorf("stopped following %s; the task goes on (starter status %s)", f.wid, taskIDOf(f.wid))
		}
		for id, stop := range subs {
			if a := v.attempts[id]; a != nil && a.printed {
				stop()
			}
		}
	}
}

// finish settles the view from the closed task's result, letting streams
// still open deliver their last text (within settleGrace).
func (f *follower) finish(ctx context.Context, deltas <-chan delta) (workflows.TaskResult, error) {
	res, err := taskstart.AwaitResult(ctx, f.c, f.wid, "")
	if err != nil {
		return res, err
	}
	v := f.view
	var records []workflows.AttemptRecord
	for _, t := range res.Turns {
		records = append(records, t.Attempts...)
	}
	v.settle(records)
	grace := time.NewTimer(settleGrace)
	defer grace.Stop()
wait:
	for !v.allStreamsDone() {
		select {
		case d := <-deltas:
			v.text(d.attempt, d.ev)
		case <-grace.C:
			break wait
		case <-ctx.Done():
			break wait
		}
	}
	v.flushSettled(true)
	v.ops, v.retry, v.waiting, v.human, v.looking = nil, nil, "", nil, nil
	v.clear()
	return res, nil
}

// allStreamsDone: no settled attempt waits for more of its text.
func (v *liveView) allStreamsDone() bool {
	for _, a := range v.attempts {
		if !a.printed && !a.streamDone {
			return false
		}
	}
	return true
}

// lookup asks each hub in turn for the text of an attempt that already
// settled, and says the stream is over when none has it.
func (f *follower) lookup(ctx context.Context, hubs []string, attemptID string, out chan<- delta) {
	send := func(ev livestream.Event) {
		select {
		case out <- delta{attempt: attemptID, ev: ev}:
		case <-ctx.Done():
		}
	}
	for _, hub := range hubs {
		err := livestream.SubscribeKnown(ctx, f.http, hub, attemptID, 0, send)
		if err == nil || ctx.Err() != nil {
			return
		}
	}
	send(livestream.Event{End: true})
}

// poll asks the server, every followPoll, whether the task still runs,
// which model attempt runs now and where, and what the workflow reports.
func (f *follower) poll(ctx context.Context, out chan<- poll) {
	tick := time.NewTicker(followPoll)
	defer tick.Stop()
	journalNext := 0
	for {
		var p poll
		desc, err := describe(ctx, f.c, f.wid)
		if err == nil {
			p.closed = desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
			p.looking = reconcilersLooking(desc.GetPendingActivities())
			for _, pa := range desc.GetPendingActivities() {
				var r contract.AttemptReport
				if pa.GetActivityType().GetName() != "ModelTurn" || len(pa.GetHeartbeatDetails().GetPayloads()) == 0 ||
					converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &r) != nil || r.AttemptID == "" {
					continue
				}
				p.running = append(p.running, r)
			}
		}
		if err == nil && !p.closed {
			if v, qerr := f.c.QueryWorkflow(ctx, f.wid, "", workflows.QueryProgress, journalNext); qerr == nil && v.Get(&p.progress) == nil {
				p.ok, journalNext = true, p.progress.JournalNext
			}
		}
		if err == nil || p.closed {
			select {
			case out <- p:
			case <-ctx.Done():
				return
			}
			if p.closed {
				return
			}
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return
		}
	}
}

// subscribe reads one attempt's stream from its worker's hub until it ends,
// resuming from the last offset when the connection breaks. When the hub
// cannot be reached it gives up and says so, so the view stops waiting
// for the stream.
func (f *follower) subscribe(ctx context.Context, url, attemptID string, out chan<- delta) {
	from := 0
	send := func(ev livestream.Event) bool {
		select {
		case out <- delta{attempt: attemptID, ev: ev}:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for tries := 0; ; tries++ {
		err := livestream.Subscribe(ctx, f.http, url, attemptID, from, func(ev livestream.Event) {
			if send(ev) {
				from = max(from, ev.Next)
			}
		})
		if err == nil || ctx.Err() != nil {
			return
		}
		if tries >= maxResubscribes {
			send(livestream.Event{From: from, Next: from, End: true})
			return
		}
		t := time.NewTimer(resubscribeAfter)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return
		}
	}
}

// reconcilersLooking is a line for each pending Reconcile that says what
// it looks for and until when, from its heartbeat details.
func reconcilersLooking(pending []*workflowpb.PendingActivityInfo) []string {
	var out []string
	for _, pa := range pending {
		var r contract.ReconcileProgress
		if pa.GetActivityType().GetName() != contract.ActivityReconcile || len(pa.GetHeartbeatDetails().GetPayloads()) == 0 ||
			converter.GetDefaultDataConverter().FromPayloads(pa.GetHeartbeatDetails(), &r) != nil {
			continue
		}
		if l := r.Line(); l != "" {
			out = append(out, "reconciler: "+l)
		}
	}
	return out
}
