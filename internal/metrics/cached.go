package metrics

import (
	"slices"
	"strings"
	"sync"

	"go.temporal.io/sdk/client"
)

// maxCachedTags bounds how many tag sets one cachedHandler keeps children
// for; past it, WithTags builds a fresh handler each time, as the
// underlying handler would. The SDK's tags (namespace, task queue, workflow
// and activity type, operation, poller and worker type, failure reason)
// come from small fixed sets, so a worker stays far below it.
const maxCachedTags = 4096

// cachedHandler wraps the Temporal SDK's OpenTelemetry handler, which
// builds an attribute set (sorting and hashing the tags) at every WithTags
// and looks its instrument up at every Counter, Gauge and Timer — and the
// SDK calls WithTags and Timer for every request it sends, every task it
// polls and every activity it runs. cachedHandler keeps the handler of
// each tag set and the instrument of each name, so a metric recorded again
// costs a map lookup: the same metrics, with the same tags, are recorded.
type cachedHandler struct {
	inner client.MetricsHandler

	children sync.Map // canonical tags → *cachedHandler
	size     sync.Mutex
	n        int // children stored

	counters sync.Map // name → client.MetricsCounter
	gauges   sync.Map // name → client.MetricsGauge
	timers   sync.Map // name → client.MetricsTimer
}

func newCachedHandler(inner client.MetricsHandler) *cachedHandler {
	return &cachedHandler{inner: inner}
}

// WithTags returns the handler of h's tags with tags set (overwriting keys
// h has), built once per distinct tag set.
func (h *cachedHandler) WithTags(tags map[string]string) client.MetricsHandler {
	key := tagsKey(tags)
	if c, ok := h.children.Load(key); ok {
		return c.(*cachedHandler)
	}
	c := newCachedHandler(h.inner.WithTags(tags))
	h.size.Lock()
	defer h.size.Unlock()
	if h.n >= maxCachedTags {
		return c
	}
	actual, loaded := h.children.LoadOrStore(key, c)
	if !loaded {
		h.n++
	}
	return actual.(*cachedHandler)
}

// Counter returns the counter name of h's tags.
func (h *cachedHandler) Counter(name string) client.MetricsCounter {
	if c, ok := h.counters.Load(name); ok {
		return c.(client.MetricsCounter)
	}
	c, _ := h.counters.LoadOrStore(name, h.inner.Counter(name))
	return c.(client.MetricsCounter)
}

// Gauge returns the gauge name of h's tags.
func (h *cachedHandler) Gauge(name string) client.MetricsGauge {
	if g, ok := h.gauges.Load(name); ok {
		return g.(client.MetricsGauge)
	}
	g, _ := h.gauges.LoadOrStore(name, h.inner.Gauge(name))
	return g.(client.MetricsGauge)
}

// Timer returns the timer name of h's tags.
func (h *cachedHandler) Timer(name string) client.MetricsTimer {
	if t, ok := h.timers.Load(name); ok {
		return t.(client.MetricsTimer)
	}
	t, _ := h.timers.LoadOrStore(name, h.inner.Timer(name))
	return t.(client.MetricsTimer)
}

// tagsKey is tags in one canonical string: its pairs sorted by key, each
// key and value followed by a NUL byte.
func tagsKey(tags map[string]string) string {
	keys := make([]string, 0, len(tags))
	n := 0
	for k, v := range tags {
		keys = append(keys, k)
		n += len(k) + len(v) + 2
	}
	slices.Sort(keys)
	var b strings.Builder
	b.Grow(n)
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(tags[k])
		b.WriteByte(0)
	}
	return b.String()
}
