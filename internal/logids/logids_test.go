package logids_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/trace"

	"github.com/capstanhq/capstan/internal/logids"
)

// lines decodes the JSON lines a logger wrote.
func lines(t *testing.T, buf *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

func TestRecordsCarryTheIDsOfTheirContext(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := logids.Logger(slog.New(slog.NewJSONHandler(&buf, nil)))

	ctx := logids.With(context.Background(), logids.IDs{TaskID: "t1", TurnID: "t1/t2", AttemptID: "t1/t2/a1"})
	log.InfoContext(ctx, "attempt")
	opCtx := logids.With(ctx, logids.IDs{OperationID: "op-9"}) // adds to what ctx carries
	log.InfoContext(opCtx, "operation", "operation_id", "op-9")
	log.Info("no context")

	got := lines(t, &buf)
	if len(got) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(got), buf.String())
	}
	want := map[string]any{"task_id": "t1", "turn_id": "t1/t2", "attempt_id": "t1/t2/a1"}
	for k, v := range want {
		if got[0][k] != v || got[1][k] != v {
			t.Errorf("%s = %v and %v, want %v in both lines", k, got[0][k], got[1][k], v)
		}
	}
	if _, ok := got[0]["operation_id"]; ok {
		t.Errorf("first line has an operation_id: %v", got[0])
	}
	if got[1]["operation_id"] != "op-9" {
		t.Errorf("second line operation_id = %v", got[1]["operation_id"])
	}
	if n := strings.Count(strings.Split(buf.String(), "\n")[1], `"operation_id"`); n != 1 {
		t.Errorf("operation_id appears %d times in %q, want once", n, strings.Split(buf.String(), "\n")[1])
	}
	for _, k := range []string{"task_id", "turn_id", "attempt_id", "operation_id"} {
		if _, ok := got[2][k]; ok {
			t.Errorf("a line logged without a context has %s: %v", k, got[2])
		}
	}
}

func TestLoggerWrapsOnceAndKeepsLevelAndAttrs(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	base := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	log := logids.Logger(logids.Logger(base)).With("component", "ledger")
	ctx := logids.With(context.Background(), logids.IDs{OperationID: "op-1"})
	log.DebugContext(ctx, "dropped")
	log.WarnContext(ctx, "kept")
	got := lines(t, &buf)
	if len(got) != 1 || got[0]["msg"] != "kept" || got[0]["component"] != "ledger" || got[0]["operation_id"] != "op-1" {
		t.Fatalf("lines = %v, want one warning with component and operation_id", got)
	}
	if n := strings.Count(buf.String(), `"operation_id"`); n != 1 {
		t.Errorf("operation_id appears %d times, want once (wrapped twice?)", n)
	}
	if logids.Logger(nil) != nil {
		t.Error("Logger(nil) is not nil")
	}
}

func TestTraceIDsInLines(t *testing.T) {
	var buf bytes.Buffer
	l := logids.Logger(slog.New(slog.NewTextHandler(&buf, nil)))
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	l.InfoContext(logids.With(ctx, logids.IDs{TaskID: "t1"}), "hello")
	line := buf.String()
	for _, want := range []string{"task_id=t1", "trace_id=0af7651916cd43dd8448eb211c80319c", "span_id=b7ad6b7169203331"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %s", line, want)
		}
	}
	buf.Reset()
	l.InfoContext(context.Background(), "plain")
	if strings.Contains(buf.String(), "trace_id") {
		t.Errorf("a context without a span logs a trace id: %q", buf.String())
	}
}
