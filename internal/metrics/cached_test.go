package metrics

import (
	"testing"
	"time"

	"go.temporal.io/sdk/client"
)

// recorder is a client.MetricsHandler that counts what is built and records
// every value under its tags.
type recorder struct {
	tags   map[string]string
	built  *int
	values map[string]float64 // "name tags" → sum
}

func (r recorder) WithTags(tags map[string]string) client.MetricsHandler {
	*r.built++
	merged := map[string]string{}
	for k, v := range r.tags {
		merged[k] = v
	}
	for k, v := range tags {
		merged[k] = v
	}
	return recorder{tags: merged, built: r.built, values: r.values}
}

func (r recorder) key(name string) string { return name + " " + tagsKey(r.tags) }
func (r recorder) Counter(name string) client.MetricsCounter {
	*r.built++
	return counterFunc(func(d int64) { r.values[r.key(name)] += float64(d) })
}
func (r recorder) Gauge(name string) client.MetricsGauge {
	*r.built++
	return gaugeFunc(func(f float64) { r.values[r.key(name)] = f })
}
func (r recorder) Timer(name string) client.MetricsTimer {
	*r.built++
	return timerFunc(func(d time.Duration) { r.values[r.key(name)] += d.Seconds() })
}

type (
	counterFunc func(int64)
	gaugeFunc   func(float64)
	timerFunc   func(time.Duration)
)

func (f counterFunc) Inc(d int64)          { f(d) }
func (f gaugeFunc) Update(v float64)       { f(v) }
func (f timerFunc) Record(d time.Duration) { f(d) }

// The cache records what the handler it wraps records — each value under
// the tags it was recorded with, later tags overwriting earlier ones — and
// builds each tag set's handler and each instrument once.
func TestCachedHandlerRecordsAsItsHandlerOnce(t *testing.T) {
	t.Parallel()
	built := 0
	inner := recorder{tags: map[string]string{}, built: &built, values: map[string]float64{}}
	h := newCachedHandler(inner)
	for range 3 {
		wf := h.WithTags(map[string]string{"namespace": "default", "workflow_type": "AgentTask"})
		wf.Counter("temporal_workflow_completed").Inc(1)
		wf.Timer("temporal_workflow_endtoend_latency").Record(time.Second)
		wf.WithTags(map[string]string{"workflow_type": "BareTask"}).Gauge("temporal_sticky_cache_size").Update(7)
		h.WithTags(map[string]string{"workflow_type": "AgentTask", "namespace": "default"}).Counter("temporal_workflow_completed").Inc(1)
	}
	h.WithTags(map[string]string{"namespace": "other"}).Counter("temporal_workflow_completed").Inc(5)

	agent := tagsKey(map[string]string{"namespace": "default", "workflow_type": "AgentTask"})
	bare := tagsKey(map[string]string{"namespace": "default", "workflow_type": "BareTask"})
	other := tagsKey(map[string]string{"namespace": "other"})
	want := map[string]float64{
		"temporal_workflow_completed " + agent:        6,
		"temporal_workflow_endtoend_latency " + agent: 3,
		"temporal_sticky_cache_size " + bare:          7,
		"temporal_workflow_completed " + other:        5,
	}
	if len(inner.values) != len(want) {
		t.Errorf("recorded %v, want %v", inner.values, want)
	}
	for k, v := range want {
		if inner.values[k] != v {
			t.Errorf("%q = %v, want %v", k, inner.values[k], v)
		}
	}
	// Three tag sets and four instruments, each built once.
	if built != 7 {
		t.Errorf("built %d handlers and instruments, want 7", built)
	}
}

// The canonical key does not depend on a map's order, and tells apart tag
// sets whose concatenations agree.
func TestTagsKeyIsCanonical(t *testing.T) {
	t.Parallel()
	a := tagsKey(map[string]string{"a": "1", "b": "2", "c": "3"})
	b := tagsKey(map[string]string{"c": "3", "a": "1", "b": "2"})
	if a != b {
		t.Errorf("keys differ: %q, %q", a, b)
	}
	if tagsKey(map[string]string{"ab": "c"}) == tagsKey(map[string]string{"a": "bc"}) {
		t.Error("different tag sets share a key")
	}
}

// What the SDK does for each request it sends (recordRequestEnd): tag the
// handler with the operation, then record its latency.
func BenchmarkSDKRequestMetric(b *testing.B) {
	m, err := New(nil)
	if err != nil {
		b.Fatal(err)
	}
	tags := map[string]string{"operation": "RespondActivityTaskCompleted", "namespace": "default", "task_queue": "capstan"}
	for _, bc := range []struct {
		name string
		h    client.MetricsHandler
	}{{"uncached", m.temporal.(*cachedHandler).inner}, {"cached", m.temporal}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				bc.h.WithTags(tags).Timer("temporal_request_latency").Record(time.Millisecond)
			}
		})
	}
}
