package sandbox

import (
	"net/http"
	"sync"
)

// Fault intercepts a request before a fake serves it. It returns true when it
// has written the response itself (an injected error, a stall, a dropped
// connection), false to let the fake serve normally. Faults run before the
// fake records any effect, so a fault that answers never counts as an effect;
// a fault that wants "acted but the answer was lost" calls next itself.
type Fault func(w http.ResponseWriter, r *http.Request, next http.Handler) bool

// faultPoint is the place a fault plugs into a fake. The zero value serves
// every request normally.
type faultPoint struct {
	mu    sync.Mutex
	fault Fault
}

// SetFault installs f (nil removes it).
func (p *faultPoint) SetFault(f Fault) {
	p.mu.Lock()
	p.fault = f
	p.mu.Unlock()
}

// intercept runs the installed fault, if any, and reports whether it answered.
func (p *faultPoint) intercept(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
	p.mu.Lock()
	f := p.fault
	p.mu.Unlock()
	return f != nil && f(w, r, next)
}
