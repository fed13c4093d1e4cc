package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/ledger"
)

// ledgerTimer adds up the time the activities spend inside ledger calls, for
// the ledger's share of task time. It times every method of
// activities.Ledger, which is all the activities can call.
type ledgerTimer struct {
	nanos   atomic.Int64
	calls   atomic.Int64
	methods [len(ledgerMethods)]methodTime
}

// methodTime is the calls of one method and the time inside them.
type methodTime struct {
	nanos atomic.Int64
	calls atomic.Int64
}

// ledgerMethods names the methods of activities.Ledger, by index.
var ledgerMethods = [...]string{"Claim", "MarkRunning", "Renew", "Complete", "Release", "TakeForReconcile",
	"Get", "PutItem", "GetItem", "GetItems", "CommitTurn", "GetTurn", "RecordDecision", "ListByTask"}

const (
	mClaim = iota
	mMarkRunning
	mRenew
	mComplete
	mRelease
	mTakeForReconcile
	mGet
	mPutItem
	mGetItem
	mGetItems
	mCommitTurn
	mGetTurn
	mRecordDecision
	mListByTask
)

// byMethod returns, per method name, its calls and the time inside them.
func (t *ledgerTimer) byMethod() map[string]methodStat {
	m := map[string]methodStat{}
	for i, name := range ledgerMethods {
		if n := t.methods[i].calls.Load(); n > 0 {
			m[name] = methodStat{calls: n, time: time.Duration(t.methods[i].nanos.Load())}
		}
	}
	return m
}

// methodStat is what byMethod reports for one method.
type methodStat struct {
	calls int64
	time  time.Duration
}

// total returns the time spent in ledger calls and how many there were.
func (t *ledgerTimer) total() (time.Duration, int64) {
	return time.Duration(t.nanos.Load()), t.calls.Load()
}

func (t *ledgerTimer) reset() {
	t.nanos.Store(0)
	t.calls.Store(0)
	for i := range t.methods {
		t.methods[i].nanos.Store(0)
		t.methods[i].calls.Store(0)
	}
}

func (t *ledgerTimer) wrap(l activities.Ledger) activities.Ledger { return &timedLedger{l: l, t: t} }

func (t *ledgerTimer) since(method int, start time.Time) {
	d := int64(time.Since(start))
	t.nanos.Add(d)
	t.calls.Add(1)
	t.methods[method].nanos.Add(d)
	t.methods[method].calls.Add(1)
}

// timedLedger is an activities.Ledger that times each call of the one it
// wraps.
type timedLedger struct {
	l activities.Ledger
	t *ledgerTimer
}

func (d *timedLedger) Claim(ctx context.Context, req ledger.ClaimRequest) (ledger.ClaimResult, error) {
	defer d.t.since(mClaim, time.Now())
	return d.l.Claim(ctx, req)
}

func (d *timedLedger) MarkRunning(ctx context.Context, id string, fence int64, facts []byte) error {
	defer d.t.since(mMarkRunning, time.Now())
	return d.l.MarkRunning(ctx, id, fence, facts)
}

func (d *timedLedger) Renew(ctx context.Context, id string, fence int64, lease time.Duration) error {
	defer d.t.since(mRenew, time.Now())
	return d.l.Renew(ctx, id, fence, lease)
}

func (d *timedLedger) Complete(ctx context.Context, c ledger.Completion) error {
	defer d.t.since(mComplete, time.Now())
	return d.l.Complete(ctx, c)
}

func (d *timedLedger) Release(ctx context.Context, id string, fence int64) error {
	defer d.t.since(mRelease, time.Now())
	return d.l.Release(ctx, id, fence)
}

func (d *timedLedger) TakeForReconcile(ctx context.Context, id, owner string, lease time.Duration) (ledger.Operation, error) {
	defer d.t.since(mTakeForReconcile, time.Now())
	return d.l.TakeForReconcile(ctx, id, owner, lease)
}

func (d *timedLedger) Get(ctx context.Context, id string) (ledger.Operation, error) {
	defer d.t.since(mGet, time.Now())
	return d.l.Get(ctx, id)
}

func (d *timedLedger) PutItem(ctx context.Context, data []byte) (string, error) {
	defer d.t.since(mPutItem, time.Now())
	return d.l.PutItem(ctx, data)
}

func (d *timedLedger) GetItem(ctx context.Context, ref string) ([]byte, error) {
	defer d.t.since(mGetItem, time.Now())
	return d.l.GetItem(ctx, ref)
}

func (d *timedLedger) GetItems(ctx context.Context, refs []string) ([][]byte, error) {
	defer d.t.since(mGetItems, time.Now())
	return d.l.GetItems(ctx, refs)
}

func (d *timedLedger) CommitTurn(ctx context.Context, turnID string, output []byte, items ...[]byte) ([]byte, error) {
	defer d.t.since(mCommitTurn, time.Now())
	return d.l.CommitTurn(ctx, turnID, output, items...)
}

func (d *timedLedger) GetTurn(ctx context.Context, turnID string) ([]byte, error) {
	defer d.t.since(mGetTurn, time.Now())
	return d.l.GetTurn(ctx, turnID)
}

func (d *timedLedger) RecordDecision(ctx context.Context, dec ledger.Decision) (ledger.Decision, bool, error) {
	defer d.t.since(mRecordDecision, time.Now())
	return d.l.RecordDecision(ctx, dec)
}

func (d *timedLedger) ListByTask(ctx context.Context, taskID string) ([]ledger.Operation, error) {
	defer d.t.since(mListByTask, time.Now())
	return d.l.ListByTask(ctx, taskID)
}
