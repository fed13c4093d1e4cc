package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Group commit: every write of a Store goes to one committer goroutine,
// which runs the writes waiting at that moment in one BEGIN IMMEDIATE
// transaction, each inside a savepoint of its own, and commits them with
// one fsync. A write whose function fails is rolled back to its savepoint
// and gets its own error; the others commit. No caller hears of success
// before the COMMIT that holds its write has returned, so a claim is still
// durable (synchronous=FULL) before its effect is sent. Writes that arrive
// one at a time run alone, as before; under concurrency the fsyncs, not the
// writes, are shared: at N concurrent activities a worker syncs about once
// per group instead of once per write.

// maxGroup bounds the writes of one transaction, so a long queue does not
// hold every writer behind one large commit.
const maxGroup = 32

// errClosed is a write asked of a closed Store.
var errClosed = errors.New("ledger/sqlite: store is closed")

// writeReq is one write waiting for the committer.
type writeReq struct {
	ctx  context.Context
	fn   func(tx *sql.Tx) error
	done chan error
}

// startCommitter starts the committer goroutine; Close stops it.
func (s *Store) startCommitter() {
	s.writes = make(chan writeReq)
	s.closing = make(chan struct{})
	s.stopped = make(chan struct{})
	go s.commitLoop()
}

// stopCommitter stops the committer once its current group is done.
func (s *Store) stopCommitter() {
	if s.closing == nil {
		return
	}
	close(s.closing)
	<-s.stopped
}

func (s *Store) commitLoop() {
	defer close(s.stopped)
	for {
		var group []writeReq
		select {
		case r := <-s.writes:
			group = append(group, r)
		case <-s.closing:
			return
		}
	more:
		for len(group) < maxGroup {
			select {
			case r := <-s.writes:
				group = append(group, r)
			default:
				break more
			}
		}
		s.commitGroup(group)
	}
}

// commitGroup runs group in one transaction and answers each write.
func (s *Store) commitGroup(group []writeReq) {
	errs := make([]error, len(group))
	answer := func() {
		for i, r := range group {
			r.done <- errs[i]
		}
	}
	// The transaction is the group's, not any one caller's: one caller's
	// cancellation must not roll back the others' writes.
	ctx := context.Background()
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
		if _, err := tx.ExecContext(ctx, "SAVEPOINT write"); err != nil {
			broken = fmt.Errorf("savepoint: %w", err)
			break
		}
		if errs[i] = r.fn(tx); errs[i] != nil {
			// Undo this write alone. If SQLite already rolled the whole
			// transaction back (an I/O error, an interrupt), the savepoint
			// is gone and so is every write of the group.
			if _, err := tx.ExecContext(ctx, "ROLLBACK TO write"); err != nil {
				broken = fmt.Errorf("roll back to savepoint: %w", err)
				break
			}
		}
		if _, err := tx.ExecContext(ctx, "RELEASE write"); err != nil {
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

// inTx runs fn in a write transaction (BEGIN IMMEDIATE), possibly shared
// with other writes waiting at the same moment (group commit, above), and
// returns once the transaction holding fn's writes is committed (nil) or
// rolled back (an error). fn returning an error undoes fn's writes alone.
// A caller whose ctx ends before its write begins gets ctx's error; once
// begun, a write is answered with what the commit did.
func (s *Store) inTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	req := writeReq{ctx: ctx, fn: fn, done: make(chan error, 1)}
	select {
	case s.writes <- req:
	case <-ctx.Done():
		return fmt.Errorf("begin: %w", ctx.Err())
	case <-s.closing:
		return errClosed
	}
	return <-req.done
}
