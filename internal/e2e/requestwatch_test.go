package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"
)

// routes recognise the requests of the endpoints the table watches.
var routes = map[string]struct {
	method string // "" for any
	path   *regexp.Regexp
}{
	"git/create-ref":                       {http.MethodPost, regexp.MustCompile(`/repos/[^/]+/[^/]+/git/refs$`)},
	"git/get-ref":                          {http.MethodGet, regexp.MustCompile(`/repos/[^/]+/[^/]+/git/ref/`)},
	"repos/create-or-update-file-contents": {http.MethodPut, regexp.MustCompile(`/repos/[^/]+/[^/]+/contents/`)},
	"pulls/create":                         {http.MethodPost, regexp.MustCompile(`/repos/[^/]+/[^/]+/pulls$`)},
	"pulls/list":                           {http.MethodGet, regexp.MustCompile(`/repos/[^/]+/[^/]+/pulls$`)},
	"issues/create-comment":                {http.MethodPost, regexp.MustCompile(`/repos/[^/]+/[^/]+/issues/\d+/comments$`)},
	"issues/list-comments":                 {http.MethodGet, regexp.MustCompile(`/repos/[^/]+/[^/]+/issues/\d+/comments$`)},
	"chat.postMessage":                     {"", regexp.MustCompile(`/api/chat\.postMessage$`)},
	"conversations.history":                {"", regexp.MustCompile(`/api/conversations\.history$`)},
}

// requestWatch is a sandbox Fault that notes when each watched endpoint is
// requested and lets the request through — except, when hold names an
// endpoint, its first request: that one acts, closes acted, and never gets
// its answer (the client must leave, or the test end). It runs before the
// fault rules, so it sees the requests they refuse too.
type requestWatch struct {
	hold    string
	acted   chan struct{}
	release chan struct{}

	mu   sync.Mutex
	seen map[string][]time.Time
}

func watchRequests(t *testing.T, hold string) *requestWatch {
	w := &requestWatch{hold: hold, acted: make(chan struct{}), release: make(chan struct{}), seen: map[string][]time.Time{}}
	t.Cleanup(func() { close(w.release) }) // before the sandbox closes
	return w
}

func (w *requestWatch) fault(rw http.ResponseWriter, r *http.Request, next http.Handler) bool {
	endpoint := ""
	for name, rt := range routes {
		if (rt.method == "" || rt.method == r.Method) && rt.path.MatchString(r.URL.Path) {
			endpoint = name
		}
	}
	if endpoint == "" {
		return false
	}
	w.mu.Lock()
	w.seen[endpoint] = append(w.seen[endpoint], time.Now())
	held := endpoint == w.hold && len(w.seen[endpoint]) == 1
	w.mu.Unlock()
	if !held {
		return false
	}
	next.ServeHTTP(httptest.NewRecorder(), r) // acts; the answer is thrown away
	// Reading the body to its end lets the server notice the client
	// leaving, which ends r.Context().
	_, _ = io.Copy(io.Discard, r.Body)
	close(w.acted)
	select {
	case <-r.Context().Done():
	case <-w.release:
	}
	return true
}

func (w *requestWatch) times(endpoint string) []time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen[endpoint])
}

func (w *requestWatch) count(endpoint string) int { return len(w.times(endpoint)) }

// first is when endpoint was first requested (zero if never).
func (w *requestWatch) first(endpoint string) time.Time {
	if ts := w.times(endpoint); len(ts) > 0 {
		return ts[0]
	}
	return time.Time{}
}

// countSince counts the requests to endpoint from since on.
func (w *requestWatch) countSince(endpoint string, since time.Time) int {
	n := 0
	for _, ts := range w.times(endpoint) {
		if !ts.Before(since) {
			n++
		}
	}
	return n
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
