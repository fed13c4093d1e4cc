package main

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

// progressTick is how often a long scan says how far it got: often enough
// that a person or a job's log sees it move, rarely enough not to flood
// either.
const progressTick = time.Second

// progressAtLeast is how many items a scan must have to report its
// progress when stderr is not a terminal: a script's log of a report over
// a small pool stays as it was, one over tens of thousands of tasks shows
// that it is not stuck.
const progressAtLeast = 1000

// scanProgress says on stderr, at most once per progressTick, how many of
// a scan's items are done: "read 500 of 12000 open tasks". It writes only
// to stderr (stdout may hold --json) and only when stderr is a terminal or
// the scan has at least progressAtLeast items; a scan that ends within the
// first tick says nothing. A nil *scanProgress says nothing.
type scanProgress struct {
	w    io.Writer
	tty  bool
	what string
	done atomic.Int64
}

// scanProgress is a progress reporter of a scan of what ("open tasks") to
// a's stderr.
func (a *app) scanProgress(what string) *scanProgress {
	_, _, tty := terminalSize(a.stderr)
	return &scanProgress{w: a.stderr, tty: tty, what: what}
}

// add counts n more items done; it is safe from any goroutine.
func (p *scanProgress) add(n int) {
	if p != nil {
		p.done.Add(int64(n))
	}
}

// start reports the progress of a scan of total items until the returned
// stop is called; once it has said anything, stop says the last count too.
func (p *scanProgress) start(total int) (stop func()) {
	if p == nil || (!p.tty && total < progressAtLeast) {
		return func() {}
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	said := false
	say := func() {
		fmt.Fprintf(p.w, "read %d of %d %s\n", p.done.Load(), total, p.what)
		said = true
	}
	wg.Go(func() {
		tick := time.NewTicker(progressTick)
		defer tick.Stop()
		for {
			select {
			case <-quit:
				return
			case <-tick.C:
				say()
			}
		}
	})
	return func() {
		close(quit)
		wg.Wait()
		if said {
			say()
		}
	}
}
