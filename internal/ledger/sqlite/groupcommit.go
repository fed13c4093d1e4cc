package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"
)

// Group commit: the writes of a Store that wait at the same moment run in
// one BEGIN IMMEDIATE transaction, each inside a savepoint of its own, and
// commit with one fsync. A write whose function fails is rolled back to its
// savepoint and gets its own error; the others commit. No caller hears of
// success before the COMMIT that holds its write has returned, so a claim is
// still durable (synchronous=FULL) before its effect is sent.
//
// There is no committer goroutine: a writer queues its write and then either
// becomes the leader — it takes the queue, runs it as one group and answers
// every write in it — or waits for the leader of the moment to answer it. A
// write that finds no other runs at once on its own goroutine, as a plain
// transaction would; under concurrency the fsyncs, not the writes, are
// shared.

// maxGroup bounds the writes of one transaction, so a long queue does not
// hold every writer behind one large commit.
const maxGroup = 32

// writeReq is one queued write.
type writeReq struct {
	ctx  context.Context
	fn   func(tx *sql.Tx) error
	done chan error // buffered: the leader never waits to answer
}

// writeQueue is a Store's queue of writes and its leader token.
type writeQueue struct {
	leader chan struct{} // capacity 1: holding a value is leading
	mu     sync.Mutex
	reqs   []*writeReq
}

func newWriteQueue() *writeQueue { return &writeQueue{leader: make(chan struct{}, 1)} }

// take removes up to maxGroup writes from the front of the queue.
func (q *writeQueue) take() []*writeReq {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := min(len(q.reqs), maxGroup)
	group := q.reqs[:n:n]
	q.reqs = q.reqs[n:]
	return group
}

// withdraw removes r from the queue if no leader has taken it yet.
func (q *writeQueue) withdraw(r *writeReq) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, x := range q.reqs {
		if x == r {
			q.reqs = append(q.reqs[:i:i], q.reqs[i+1:]...)
			return true
		}
	}
	return false
}

// inTx runs fn in a write transaction (BEGIN IMMEDIATE), possibly shared
// with other writes waiting at the same moment (group commit, above), and
// returns once the transaction holding fn's writes is committed (nil) or
// rolled back (an error). fn returning an error undoes fn's writes alone.
// A caller whose ctx ends while its write is still queued gets ctx's error
// and nothing is written; once taken into a group, a write is answered with
// what the commit did.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	q := s.wq
	r := &writeReq{ctx: ctx, fn: fn, done: make(chan error, 1)}
	q.mu.Lock()
	q.reqs = append(q.reqs, r)
	q.mu.Unlock()
	cancelled := ctx.Done()
	for {
		select {
		case err := <-r.done:
			return err
		case q.leader <- struct{}{}:
			// Leading: run what is queued, most likely r among it. If an
			// earlier leader took r, it has answered r before letting go.
			if group := q.take(); len(group) > 0 {
				s.commitGroup(group)
			}
			<-q.leader
		case <-cancelled:
			if q.withdraw(r) {
				return fmt.Errorf("begin: %w", ctx.Err())
			}
			cancelled = nil // taken by a leader: wait for its answer
		}
	}
}

// commitGroup runs group in one transaction and answers each write.
func (s *Store) commitGroup(group []*writeReq) {
	// The transaction is the group's, not any one caller's: one caller's
	// cancellation must not roll back the others' writes.
	ctx := context.Background()
	// The writers' lock is taken before BEGIN IMMEDIATE and let go after
	// COMMIT or ROLLBACK, so another Store's leader waiting for it finds
	// the database lock free when it wakes. Not getting it in time changes
	// nothing but the wake-up: BEGIN IMMEDIATE waits as it always did.
	// It is let go before the writes are answered, the transaction being
	// over by then.
	locked := s.wl.acquire(busyTimeoutMillis * time.Millisecond)
	errs := make([]error, len(group))
	answer := func() {
		if locked {
			s.wl.release()
		}
		for i, r := range group {
			r.done <- errs[i]
		}
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		for i := range errs {
			errs[i] = fmt.Errorf("begin: %w", err)
		}
		answer()
		return
	}
	var broken error // the transaction can no longer be trusted
	for i, r := range group {
		if err := r.ctx.Err(); err != nil {
			errs[i] = fmt.Errorf("begin: %w", err)
			continue
		}
		if _, err := s.exec(ctx, tx, sqlSavepoint); err != nil {
			broken = fmt.Errorf("savepoint: %w", err)
			break
		}
		if errs[i] = r.fn(tx); errs[i] != nil {
			// Undo this write alone. If SQLite already rolled the whole
			// transaction back (an I/O error, an interrupt), the savepoint
			// is gone and so is every write of the group.
			if _, err := s.exec(ctx, tx, sqlRollbackTo); err != nil {
				broken = fmt.Errorf("roll back to savepoint: %w", err)
				break
			}
		}
		if _, err := s.exec(ctx, tx, sqlReleaseSave); err != nil {
			broken = fmt.Errorf("release savepoint: %w", err)
			break
		}
	}
	if broken == nil {
		if err := tx.Commit(); err != nil {
			broken = fmt.Errorf("commit: %w", err)
		}
	} else {
		tx.Rollback()
	}
	if broken != nil {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = broken
			}
		}
	}
	answer()
}
