package mcp

import (
	"context"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"
)

// A call made inside a span carries its trace context in _meta, beside
// the operation id; one made outside any span carries none.
func TestCallMetaCarriesTraceparent(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("0af7651916cd43dd8448eb211c80319c")
	sid, _ := trace.SpanIDFromHex("b7ad6b7169203331")
	ctx := trace.ContextWithSpanContext(context.Background(), trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled}))
	meta := withTraceContext(ctx, sdk.Meta{MetaOperationID: "op-1"})
	if got, want := meta["traceparent"], "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"; got != want {
		t.Errorf("_meta traceparent = %v, want %s", got, want)
	}
	if meta[MetaOperationID] != "op-1" {
		t.Errorf("_meta lost the operation id: %v", meta)
	}
	if plain := withTraceContext(context.Background(), nil); plain != nil {
		t.Errorf("_meta outside a span = %v, want none", plain)
	}
}
