package capstantest

import (
	"net/http"
	"sync"
	"time"

	"github.com/capstanhq/capstan/internal/httpfault"
)

// Faults is an [http.Handler] middleware that makes the user's own
// service misbehave the way real services do, so a test can check that a
// tool's effects still happen exactly once: it loses the answer after
// acting ([Faults.DropAfterActing]), refuses before acting
// ([Faults.FailBeforeActing]) or answers late ([Faults.DelayAnswer]), for
// the next requests matching a method and a path. It counts the requests
// it receives per method and path. It is safe for concurrent use.
type Faults struct {
	next http.Handler

	mu     sync.Mutex
	rules  []*faultRule
	counts map[string]int
	stop   chan struct{}
	closed bool
}

type faultKind int

const (
	dropAfter faultKind = iota
	failBefore
	delayAnswer
)

type faultRule struct {
	method, path string
	kind         faultKind
	status       int
	delay        time.Duration
	left         int // requests still to strike; -1: every one
}

// NewFaults wraps next. Without a fault added it passes every request
// through, counting it.
func NewFaults(next http.Handler) *Faults {
	return &Faults{next: next, counts: map[string]int{}, stop: make(chan struct{})}
}

func (f *Faults) add(r faultRule, times int) {
	if times <= 0 {
		r.left = -1
	} else {
		r.left = times
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = append(f.rules, &r)
}

// DropAfterActing makes the next times requests with method and path
// (r.URL.Path, exactly; times 0: every one) reach the wrapped handler,
// which acts, and then closes the connection without an answer: the
// effect happened and the client cannot know.
func (f *Faults) DropAfterActing(method, path string, times int) {
	f.add(faultRule{method: method, path: path, kind: dropAfter}, times)
}

// FailBeforeActing answers the next times requests with method and path
// with status (for example 502) without calling the wrapped handler:
// nothing happened.
func (f *Faults) FailBeforeActing(method, path string, status, times int) {
	f.add(faultRule{method: method, path: path, kind: failBefore, status: status}, times)
}

// DelayAnswer makes the next times requests with method and path reach
// the wrapped handler, which acts, and holds its answer for delay: make
// it longer than the client's timeout for a client that gives up after
// the effect. A held answer is dropped when the client leaves or
// [Faults.Close] is called.
func (f *Faults) DelayAnswer(method, path string, delay time.Duration, times int) {
	f.add(faultRule{method: method, path: path, kind: delayAnswer, delay: delay}, times)
}

// Clear removes every fault; the counts stay.
func (f *Faults) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

// Close releases every answer DelayAnswer holds, dropping its connection;
// later delays give up at once.
func (f *Faults) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.closed {
		f.closed = true
		close(f.stop)
	}
}

// Requests is how many requests with method and path the middleware
// received, faulted ones included.
func (f *Faults) Requests(method, path string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[method+" "+path]
}

// take counts r and returns the fault that strikes it, if any.
func (f *Faults) take(r *http.Request) (faultRule, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[r.Method+" "+r.URL.Path]++
	for _, rule := range f.rules {
		if rule.method == r.Method && rule.path == r.URL.Path && rule.left != 0 {
			if rule.left > 0 {
				rule.left--
			}
			return *rule, true
		}
	}
	return faultRule{}, false
}

// ServeHTTP implements [http.Handler].
func (f *Faults) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rule, ok := f.take(r)
	if !ok {
		f.next.ServeHTTP(w, r)
		return
	}
	switch rule.kind {
	case failBefore:
		http.Error(w, http.StatusText(rule.status), rule.status)
	case dropAfter:
		f.next.ServeHTTP(httpfault.NewHeldResponse(), r)
		httpfault.DropConnection(w)
	case delayAnswer:
		held := httpfault.NewHeldResponse()
		f.next.ServeHTTP(held, r)
		t := time.NewTimer(rule.delay)
		defer t.Stop()
		select {
		case <-t.C:
			held.WriteTo(w)
		case <-r.Context().Done():
			httpfault.DropConnection(w)
		case <-f.stop:
			httpfault.DropConnection(w)
		}
	}
}
