// Package logids carries capstan's identifiers — task_id, turn_id,
// attempt_id and operation_id — in a context, and adds them to every log
// record written with that context, with the trace_id and span_id of the
// OpenTelemetry span the context carries, when it carries one.
//
// An activity puts the ids of its input into its context once, with With;
// every line logged through a Handler-wrapped logger with that context (or a
// context derived from it: the ledger's, a provider's) then carries them,
// so an operator can follow one task, turn, attempt or operation through the
// logs of a whole pool without each call site repeating them.
package logids

import (
	"context"
	"log/slog"

	"go.opentelemetry.io/otel/trace"
)

// Attribute keys, as they appear in the logs.
const (
	KeyTaskID      = "task_id"
	KeyTurnID      = "turn_id"
	KeyAttemptID   = "attempt_id"
	KeyOperationID = "operation_id"
	// KeyTraceID and KeySpanID are the OpenTelemetry trace and span of
	// the context a line is logged with, when it has one (internal/trace:
	// only while traces are exported).
	KeyTraceID = "trace_id"
	KeySpanID  = "span_id"
)

// IDs are the identifiers a log line can carry; an empty field is left out.
type IDs struct {
	TaskID      string
	TurnID      string
	AttemptID   string
	OperationID string
}

type ctxKey struct{}

// With returns ctx carrying ids. Fields left empty keep the value ctx
// already carries, so an inner call can add an operation id to a context
// that names the task.
func With(ctx context.Context, ids IDs) context.Context {
	cur := From(ctx)
	if ids.TaskID != "" {
		cur.TaskID = ids.TaskID
	}
	if ids.TurnID != "" {
		cur.TurnID = ids.TurnID
	}
	if ids.AttemptID != "" {
		cur.AttemptID = ids.AttemptID
	}
	if ids.OperationID != "" {
		cur.OperationID = ids.OperationID
	}
	return context.WithValue(ctx, ctxKey{}, cur)
}

// From returns the ids ctx carries; zero when it carries none.
func From(ctx context.Context) IDs {
	if ctx == nil {
		return IDs{}
	}
	ids, _ := ctx.Value(ctxKey{}).(IDs)
	return ids
}

// Attrs are the non-empty ids as log attributes, in a fixed order.
func (ids IDs) Attrs() []slog.Attr {
	var out []slog.Attr
	for _, kv := range [...][2]string{
		{KeyTaskID, ids.TaskID}, {KeyTurnID, ids.TurnID},
		{KeyAttemptID, ids.AttemptID}, {KeyOperationID, ids.OperationID},
	} {
		if kv[1] != "" {
			out = append(out, slog.String(kv[0], kv[1]))
		}
	}
	return out
}

// Logger returns l with a handler that adds the ids of the context each
// record is logged with (see With). Wrapping twice is wrapping once.
func Logger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return nil
	}
	if _, ok := l.Handler().(*handler); ok {
		return l
	}
	return slog.New(&handler{next: l.Handler()})
}

// handler adds the context's ids to each record. An id the record itself
// names (a call site that passes operation_id) is not added twice; an id
// bound earlier with Logger.With is not seen, so call sites leave the ids to
// the context.
type handler struct {
	next slog.Handler
}

func (h *handler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	attrs := From(ctx).Attrs()
	if ctx != nil {
		if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
			attrs = append(attrs, slog.String(KeyTraceID, sc.TraceID().String()), slog.String(KeySpanID, sc.SpanID().String()))
		}
	}
	if len(attrs) == 0 {
		return h.next.Handle(ctx, r)
	}
	present := map[string]bool{}
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case KeyTaskID, KeyTurnID, KeyAttemptID, KeyOperationID, KeyTraceID, KeySpanID:
			present[a.Key] = true
		}
		return true
	})
	r = r.Clone()
	for _, a := range attrs {
		if !present[a.Key] {
			r.AddAttrs(a)
		}
	}
	return h.next.Handle(ctx, r)
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{next: h.next.WithAttrs(attrs)}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{next: h.next.WithGroup(name)}
}
