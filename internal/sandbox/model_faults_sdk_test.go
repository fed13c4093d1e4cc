package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/packages/ssestream"
)

// The model faults as openai-go, the client capstan's OpenAI provider uses,
// reads them.

// sdkStream streams one demo first-step completion through openai-go,
// counting the chunks it yields, with ctx so a test can give up.
func sdkStream(ctx context.Context, client openai.Client, model string) (streamResult, error) {
	stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
		Model:         model,
		Messages:      append([]openai.ChatCompletionMessageParamUnion{openai.SystemMessage(testSystem)}, conversation(0)...),
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
	})
	defer stream.Close()
	var res streamResult
	for stream.Next() {
		res.acc.AddChunk(stream.Current())
		res.chunks++
	}
	return res, stream.Err()
}

func TestModelFaultsThroughOpenAISDK(t *testing.T) {
	t.Run("status", func(t *testing.T) {
		m, srv := newModelServer(t)
		addRule(t, m, FaultRule{Endpoint: openAIEndpoint, Kind: FaultStatus, Status: 429, RetryAfter: 2 * time.Second, Times: 1})
		_, err := sdkStream(context.Background(), newOpenAIClient(srv.URL+"/v1"), "demo")
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || apiErr.Code != "rate_limit_exceeded" ||
			apiErr.Response.Header.Get("Retry-After") != "2" {
			t.Fatalf("err = %v, want a 429 rate_limit_exceeded with Retry-After 2", err)
		}
	})
	t.Run("context_overflow", func(t *testing.T) {
		m, srv := newModelServer(t)
		addRule(t, m, FaultRule{Endpoint: openAIEndpoint, Kind: FaultContextOverflow})
		_, err := sdkStream(context.Background(), newOpenAIClient(srv.URL+"/v1"), "demo")
		var apiErr *openai.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Code != "context_length_exceeded" || apiErr.Param != "messages" {
			t.Fatalf("err = %v, want 400 context_length_exceeded", err)
		}
	})
	for _, tt := range []struct {
		kind FaultKind
		want string
	}{{FaultOverloadedEvent, `"type":"server_error"`}, {FaultRateLimitEvent, `"code":"rate_limit_exceeded"`}} {
		t.Run(string(tt.kind), func(t *testing.T) {
			m, srv := newModelServer(t)
			addRule(t, m, FaultRule{Endpoint: openAIEndpoint, Kind: tt.kind, AfterEvents: 3})
			res, err := sdkStream(context.Background(), newOpenAIClient(srv.URL+"/v1"), "demo")
			var se *ssestream.StreamError
			if !errors.As(err, &se) || !strings.Contains(string(se.Event.Data), tt.want) || res.chunks != 3 {
				t.Fatalf("after %d chunks: %v, want 3 chunks then a stream error with %s", res.chunks, err, tt.want)
			}
		})
	}
	t.Run("answers", func(t *testing.T) {
		m, srv := newModelServer(t)
		client := newOpenAIClient(srv.URL + "/v1")
		for _, kind := range []FaultKind{FaultEmpty, FaultMaxTokens, FaultMalformedArguments, FaultUnknownTool} {
			addRule(t, m, FaultRule{Endpoint: openAIEndpoint, Kind: kind, Times: 1})
		}
		check := func(what string, ok func(openai.ChatCompletionChoice) bool) {
			t.Helper()
			res, err := sdkStream(context.Background(), client, "demo")
			if err != nil || len(res.acc.Choices) != 1 || !ok(res.acc.Choices[0]) {
				t.Errorf("%s: %v %+v", what, err, res.acc.Choices)
			}
		}
		check("empty", func(c openai.ChatCompletionChoice) bool {
			return c.FinishReason == "stop" && c.Message.Content == "" && len(c.Message.ToolCalls) == 0
		})
		check("max_tokens", func(c openai.ChatCompletionChoice) bool {
			return c.FinishReason == "length" && c.Message.Content == "I'll make a " && len(c.Message.ToolCalls) == 0
		})
		check("malformed_arguments", func(c openai.ChatCompletionChoice) bool {
			return c.FinishReason == "tool_calls" && len(c.Message.ToolCalls) == 1 && !json.Valid([]byte(c.Message.ToolCalls[0].Function.Arguments))
		})
		check("unknown_tool", func(c openai.ChatCompletionChoice) bool {
			return c.FinishReason == "tool_calls" && len(c.Message.ToolCalls) == 1 && c.Message.ToolCalls[0].Function.Name == UnknownToolName
		})
		if st := m.Stats(); st.Requests != 4 || st.Faulted != 4 {
			t.Errorf("stats %+v", st)
		}
	})
	t.Run("stall", func(t *testing.T) {
		m, srv, holding := newWireServer(t)
		addRule(t, m, FaultRule{Endpoint: openAIEndpoint, Kind: FaultStall, AfterEvents: 2})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		client := newOpenAIClient(srv.URL + "/v1")
		stream := client.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{Model: "demo", Messages: conversation(0)})
		defer stream.Close()
		for i := range 2 {
			if !stream.Next() {
				t.Fatalf("chunk %d: %v", i+1, stream.Err())
			}
		}
		waitFor(t, holding, "the stall")
		cancel() // the client gives up
		if stream.Next() || !errors.Is(stream.Err(), context.Canceled) {
			t.Fatalf("after the stall: %v, want no chunk and context.Canceled", stream.Err())
		}
		waitHeldDone(t, m)
	})
	t.Run("hold_headers", func(t *testing.T) {
		m, srv, holding := newWireServer(t)
		addRule(t, m, FaultRule{Endpoint: openAIEndpoint, Kind: FaultHoldHeaders})
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error, 1)
		go func() {
			_, err := sdkStream(ctx, newOpenAIClient(srv.URL+"/v1"), "demo")
			errc <- err
		}()
		waitFor(t, holding, "the hold")
		cancel()
		if err := waitFor(t, errc, "the client to give up"); !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		waitHeldDone(t, m)
	})
	t.Run("reset_connection", func(t *testing.T) {
		m, srv := newModelServer(t)
		addRule(t, m, FaultRule{Endpoint: openAIEndpoint, Kind: FaultResetConnection, Times: 1})
		_, err := sdkStream(context.Background(), newOpenAIClient(srv.URL+"/v1"), "demo")
		var apiErr *openai.Error
		if err == nil || errors.As(err, &apiErr) {
			t.Fatalf("err = %v, want a transport error", err)
		}
	})
	t.Run("endless", func(t *testing.T) {
		m, srv := newModelServer(t)
		addRule(t, m, FaultRule{Endpoint: openAIEndpoint, Kind: FaultEndless})
		client := newOpenAIClient(srv.URL + "/v1")
		stream := client.Chat.Completions.NewStreaming(context.Background(),
			openai.ChatCompletionNewParams{Model: "demo", Messages: conversation(0)})
		var acc openai.ChatCompletionAccumulator
		for i := 0; i < 30 && stream.Next(); i++ {
			acc.AddChunk(stream.Current())
		}
		if err := stream.Err(); err != nil || len(acc.Choices) != 1 || acc.Choices[0].FinishReason != "" ||
			!strings.HasPrefix(acc.Choices[0].Message.Content, strings.Repeat(endlessWord, 20)) {
			t.Fatalf("err %v, choices %+v", err, acc.Choices)
		}
		stream.Close() // the client goes away
		waitHeldDone(t, m)
	})
}
