package sandbox

import (
	"net/http"
	"strings"
	"sync"
)

// Fault intercepts a request before a fake serves it. It returns true when it
// has written the response itself (an injected error, a stall, a dropped
// connection), false to let the fake serve normally. Faults run before the
// fake records any effect, so a fault that answers never counts as an effect;
// a fault that wants "acted but the answer was lost" calls next itself.
//
// A Fault is the free-form plug point for tests in this process; the
// declarative [FaultRule] covers the common cases and can also be set over
// HTTP on a running sandbox.
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

// sandboxControlPrefix starts the paths of the sandbox's own endpoints
// (stats, faults), which are never faulted and never counted.
const sandboxControlPrefix = "/_sandbox/"

// sandboxControl reports whether path names a control endpoint, and which.
// Any mount prefix is allowed (the GitHub fake may sit under "/api/v3/"),
// except that a path inside the GitHub API ("/repos/...") is always API: a
// file called _sandbox/stats in a repository must stay readable.
func sandboxControl(path string) (name string, ok bool) {
	i := strings.LastIndex(path, sandboxControlPrefix)
	if i < 0 || strings.Contains(path[:i], "/repos/") {
		return "", false
	}
	name = path[i+len(sandboxControlPrefix):]
	return name, name != "" && !strings.Contains(name, "/")
}

// serveFake is the opening every fake's ServeHTTP shares. A control request
// is answered by the handler control names for it (404 when there is none),
// bypassing faults and counters, so a test can always read and steer the
// fake; any other request goes through the installed Fault, then to api.
func serveFake(w http.ResponseWriter, r *http.Request, p *faultPoint, control map[string]http.HandlerFunc, api http.Handler) {
	if name, ok := sandboxControl(r.URL.Path); ok {
		if h := control[name]; h != nil {
			h(w, r)
			return
		}
		http.NotFound(w, r)
		return
	}
	if p.intercept(w, r, api) {
		return
	}
	api.ServeHTTP(w, r)
}

// statsHandler serves GET /_sandbox/stats with the snapshot stats returns.
func statsHandler[S any](stats func() S) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		writeJSONBody(w, http.StatusOK, stats())
	}
}
