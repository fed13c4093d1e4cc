package model

import (
	"context"
	"net/http/httptrace"
	"sync/atomic"
)

// phaseOrder ranks the phases an attempt moves through. PhaseUnknown is not a
// step on this path: it is a verdict a provider gives when the transport
// cannot tell, so a PhaseRecorder never holds it.
var phaseOrder = [...]Phase{
	PhaseNotSent,
	PhaseSentNoHeaders,
	PhaseHeadersReceived,
	PhaseStreamPartial,
	PhaseStreamCompleted,
}

func phaseRank(p Phase) (int32, bool) {
	for i, q := range phaseOrder {
		if q == p {
			return int32(i), true
		}
	}
	return 0, false
}

// PhaseRecorder tracks the furthest phase one attempt reached (docs/design.md §4.1).
//
// Guarantees: the zero value is ready to use and reads PhaseNotSent; the phase
// only ever moves forward, so a late or duplicate signal (a trace hook firing
// after the stream already advanced, a retry inside the transport) can never
// make an attempt look less far along than it was; all methods are safe for
// concurrent use, because httptrace hooks run on the transport's goroutines
// while the stream reader and the heartbeat read the phase elsewhere.
type PhaseRecorder struct {
	rank atomic.Int32
}

// Advance moves the recorder to p if p is further than the current phase.
// Earlier phases and PhaseUnknown are ignored.
func (r *PhaseRecorder) Advance(p Phase) {
	next, ok := phaseRank(p)
	if !ok {
		return
	}
	for {
		cur := r.rank.Load()
		if next <= cur || r.rank.CompareAndSwap(cur, next) {
			return
		}
	}
}

// Phase returns the furthest phase reached so far.
func (r *PhaseRecorder) Phase() Phase {
	return phaseOrder[r.rank.Load()]
}

// WroteRequestBytes reports whether any byte of the request may have been
// written. It is false only when the transport never started writing the
// request, which is the proof docs/design.md §4.1 asks for before a failure may be
// called not_sent.
func (r *PhaseRecorder) WroteRequestBytes() bool {
	return r.rank.Load() > 0
}

// TraceContext returns ctx carrying an httptrace.ClientTrace that advances rec:
// to PhaseSentNoHeaders as soon as the transport starts writing the request
// (its first header field, the header block, or the whole request, whichever
// it reports first), and to PhaseHeadersReceived on the first response byte.
//
// The write hooks fire as the transport hands bytes to the connection, which
// may be slightly before they reach the wire. That errs on the safe side: a
// connection failure is reported as NOT_SENT only when no write hook fired, so
// a request the server may have seen is never retried as if it had not been
// sent. A failed write (WroteRequest with an error) still counts as written,
// since part of the request may have left.
//
// Any ClientTrace already in ctx keeps receiving its hooks
// (httptrace.WithClientTrace composes them).
func TraceContext(ctx context.Context, rec *PhaseRecorder) context.Context {
	sent := func() { rec.Advance(PhaseSentNoHeaders) }
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaderField:     func(string, []string) { sent() },
		WroteHeaders:         sent,
		WroteRequest:         func(httptrace.WroteRequestInfo) { sent() },
		GotFirstResponseByte: func() { rec.Advance(PhaseHeadersReceived) },
	})
}
