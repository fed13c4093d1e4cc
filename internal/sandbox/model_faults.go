package sandbox

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/httpfault"
)

// The model fake's faults: what a provider does to a streamed answer when it
// fails. Each one is selectable for the first Times requests to a wire
// format's endpoint (a [FaultRule]) or for a step of a script (its "fault"
// field), and works the same in both wire formats.
const (
	// FaultStatus answers Status (400 to 599: 429, 500, 503, 529, ...)
	// with the format's error body for it, and Retry-After (RetryAfter) and
	// retry-after-ms (RetryAfterMsHeader) only when they are set.
	FaultStatus FaultKind = "status"
	// FaultResetConnection reads the request, then resets the TCP
	// connection (RST) without a byte of answer. The client has written its
	// request by then: it sees "connection reset by peer" (or EOF) while
	// waiting for the headers, which a phase recorder reports as
	// SENT_NO_HEADERS, not NOT_SENT. A true NOT_SENT needs a dial that
	// fails: the kernel completes the TCP handshake before the fake can
	// accept, and the client writes its request at once, so no server that
	// listens can refuse a request before it is sent. FaultRefuseConnection
	// gives one by closing the port, for a time rather than per request.
	FaultResetConnection FaultKind = "reset_connection"
	// FaultHoldHeaders never sends the headers: the request is held until
	// the client gives up (its context ends or it closes the connection) or
	// the sandbox closes.
	FaultHoldHeaders FaultKind = "hold_headers"
	// FaultStall sends the headers and AfterEvents events of the answer,
	// then nothing until the client gives up or the sandbox closes.
	FaultStall FaultKind = "stall"
	// FaultEndless opens an answer and then sends a short text delta every
	// endlessInterval, forever: it never finishes, until the client goes
	// away or the sandbox closes.
	FaultEndless FaultKind = "endless"
	// FaultOverloadedEvent sends AfterEvents events, then an overload error
	// inside the stream (OpenAI: data: {"error":{"type":"server_error"...}};
	// Anthropic: event: error, overloaded_error), and ends the response.
	FaultOverloadedEvent FaultKind = "overloaded_event"
	// FaultRateLimitEvent is FaultOverloadedEvent with a rate-limit error
	// (OpenAI: code rate_limit_exceeded; Anthropic: rate_limit_error).
	FaultRateLimitEvent FaultKind = "rate_limit_event"
	// FaultEmpty finishes the answer with no content at all: finish reason
	// "stop" (Anthropic: no content block, stop_reason "end_turn").
	FaultEmpty FaultKind = "empty"
	// FaultMalformedArguments streams the step's first tool call (a
	// github_get_file call when the step has none) with its arguments' last
	// byte cut off, so they are not valid JSON.
	FaultMalformedArguments FaultKind = "malformed_arguments"
	// FaultUnknownTool renames the step's first tool call (adding one with
	// arguments {} when the step has none) to UnknownToolName.
	FaultUnknownTool FaultKind = "unknown_tool"
	// FaultContextOverflow answers 400 as the provider does for a prompt
	// longer than the model's context: OpenAI code context_length_exceeded,
	// Anthropic invalid_request_error "prompt is too long: N tokens > M
	// maximum". With PromptBytesOver it strikes only requests whose body is
	// longer than that.
	FaultContextOverflow FaultKind = "context_overflow"
	// FaultMaxTokens streams the first half of the step's text (no tool
	// calls) and finishes with "length" (Anthropic: stop_reason
	// "max_tokens"), as an answer cut by the token limit.
	FaultMaxTokens FaultKind = "max_tokens"
)

// UnknownToolName is the tool FaultUnknownTool calls; no agent offers it.
const UnknownToolName = "sandbox_unknown_tool"

// endlessInterval paces FaultEndless: far below any idle timeout, so only a
// total-duration limit can end it.
const endlessInterval = 50 * time.Millisecond

// endlessWord is the text each FaultEndless delta carries.
const endlessWord = "more "

// maxTokensFallback is the text FaultMaxTokens cuts when the step has none.
const maxTokensFallback = "This answer is longer than the token limit allows, so it stops somewhere in the middle of a sentence."

// modelFaultDialect is what the model's rules may say.
var modelFaultDialect = faultDialect{
	endpoints: []string{openAIEndpoint, anthropicEndpoint},
	kinds: []FaultKind{FaultStatus, FaultRefuseConnection, FaultResetConnection, FaultHoldHeaders, FaultStall, FaultEndless,
		FaultOverloadedEvent, FaultRateLimitEvent, FaultEmpty, FaultMalformedArguments, FaultUnknownTool,
		FaultContextOverflow, FaultMaxTokens},
	check: func(*FaultRule) error { return nil }, // the model has no rate-limit kinds to check
}

// chooseFault returns the fault for this request: the oldest unspent rule
// for endpoint that applies to a body of promptBytes, else the step's own
// fault while it has strikes left. Either is counted as fired.
func (m *Model) chooseFault(endpoint string, promptBytes int, scriptName string, stepIndex int, st step) (FaultRule, bool) {
	applies := func(rule FaultRule) bool {
		// A refusal acts on the port, not on requests (serve resets the
		// ones that slip through).
		return rule.Kind != FaultRefuseConnection && (rule.PromptBytesOver == 0 || promptBytes > rule.PromptBytesOver)
	}
	if rule, ok := m.take(endpoint, applies); ok {
		return rule, true
	}
	if st.fault == nil || !applies(*st.fault) {
		return FaultRule{}, false
	}
	key := stepKey{script: scriptName, step: stepIndex}
	m.mu.Lock()
	defer m.mu.Unlock()
	if st.fault.Times != 0 && m.stepFired[key] >= st.fault.Times {
		return FaultRule{}, false
	}
	m.stepFired[key]++
	return *st.fault, true
}

// serveFault answers a request with fault rule instead of the step.
func (m *Model) serveFault(w http.ResponseWriter, r *http.Request, wire wireFormat, enc streamEncoder, st step, rule FaultRule, promptBytes int) {
	switch rule.Kind {
	case FaultStatus:
		if rule.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.FormatInt(retryAfterSeconds(rule.RetryAfter), 10))
		}
		if rule.RetryAfterMsHeader > 0 {
			ms := (rule.RetryAfterMsHeader + time.Millisecond - 1) / time.Millisecond
			w.Header().Set("retry-after-ms", strconv.FormatInt(int64(ms), 10))
		}
		kind := errKindForStatus(rule.Status)
		wire.writeError(w, wireError{status: rule.Status, kind: kind, message: statusMessage(kind, rule.Status)})
	case FaultContextOverflow:
		wire.writeError(w, contextOverflowError(wire, rule, promptBytes))
	case FaultResetConnection:
		resetConnection(w)
	case FaultHoldHeaders:
		m.holdUntilGone(w, r)
	case FaultStall:
		out := startStream(w)
		if m.playOn(out, beforeClosing(enc.answer(st, finishNatural), rule.AfterEvents)) {
			m.holdUntilGone(w, r)
		}
	case FaultOverloadedEvent, FaultRateLimitEvent:
		kind, msg := errOverloaded, "Overloaded"
		if rule.Kind == FaultRateLimitEvent {
			kind, msg = errRateLimit, "Rate limit reached for requests. Please try again later."
		}
		frames := beforeClosing(enc.answer(st, finishNatural), rule.AfterEvents)
		m.play(w, append(frames, enc.errorEvent(kind, msg)))
	case FaultEndless:
		m.endless(w, r, enc)
	case FaultEmpty:
		m.play(w, enc.answer(step{}, finishNatural))
	case FaultMalformedArguments:
		m.play(w, enc.answer(malformedArguments(st), finishNatural))
	case FaultUnknownTool:
		m.play(w, enc.answer(unknownTool(st), finishNatural))
	case FaultMaxTokens:
		m.play(w, enc.answer(cutByTokenLimit(st), finishLength))
	default: // validation admits only the kinds above
		panic(fmt.Sprintf("sandbox: model fault %q has no handler", rule.Kind))
	}
}

// beforeClosing is the first n frames, but never one of the closing ones.
func beforeClosing(frames []frame, n int) []frame {
	for i, f := range frames {
		if f.closing {
			return frames[:min(n, i)]
		}
	}
	return frames[:min(n, len(frames))]
}

// endless sends an opening, then a text delta every endlessInterval until a
// write fails, the client leaves, or the sandbox closes. The ticker paces
// the deltas; nothing polls.
func (m *Model) endless(w http.ResponseWriter, r *http.Request, enc streamEncoder) {
	if !m.startHold() {
		httpfault.DropConnection(w)
		return
	}
	defer m.held.Done()
	out := startStream(w)
	if !m.playOn(out, enc.endlessOpening()) {
		return
	}
	t := time.NewTicker(endlessInterval)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			httpfault.DropConnection(w)
			return
		case <-m.stop:
			httpfault.DropConnection(w)
			return
		case <-t.C:
			if !m.playOn(out, []frame{enc.endlessText(endlessWord)}) {
				return
			}
		}
	}
}

// statusMessage is what a refusal with status says.
func statusMessage(kind errKind, status int) string {
	switch kind {
	case errRateLimit:
		return "Rate limit reached for requests. Please try again later. (sandbox fault)"
	case errOverloaded:
		return "Overloaded: the server is not ready to take your request. (sandbox fault)"
	case errServer:
		return "The server had an error while processing your request. (sandbox fault)"
	}
	return fmt.Sprintf("The request was refused with status %d. (sandbox fault)", status)
}

// contextOverflowError is the provider's 400 for a prompt too long: the
// limit it names is PromptBytesOver in tokens when the rule has one, else
// one token less than the prompt.
func contextOverflowError(wire wireFormat, rule FaultRule, promptBytes int) wireError {
	tokens := estimateTokens(promptBytes)
	limit := max(tokens-1, 1)
	if rule.PromptBytesOver > 0 {
		limit = max(rule.PromptBytesOver/4, 1)
	}
	msg := fmt.Sprintf("This model's maximum context length is %d tokens. However, your messages resulted in %d tokens. "+
		"Please reduce the length of the messages.", limit, tokens)
	if wire.endpoint() == anthropicEndpoint {
		msg = fmt.Sprintf("prompt is too long: %d tokens > %d maximum", tokens, limit)
	}
	return wireError{status: http.StatusBadRequest, kind: errContextOverflow, message: msg}
}

// resetConnection closes the connection with a TCP reset and no answer.
func resetConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // close sends RST, not FIN
	}
	_ = conn.Close()
}

// malformedArguments is st with its first tool call's arguments cut short
// of their closing brace.
func malformedArguments(st step) step {
	out := withToolCall(st, toolCall{Name: "github_get_file", Arguments: json.RawMessage(turnsArguments)})
	args := out.ToolCalls[0].Arguments
	out.ToolCalls[0].Arguments = args[:len(args)-1]
	return out
}

// unknownTool is st with its first tool call renamed to UnknownToolName.
func unknownTool(st step) step {
	out := withToolCall(st, toolCall{Arguments: json.RawMessage(`{}`)})
	out.ToolCalls[0].Name = UnknownToolName
	return out
}

// withToolCall copies st, adding fallback as its only call when it has none.
func withToolCall(st step, fallback toolCall) step {
	out := step{Text: st.Text, ToolCalls: append([]toolCall(nil), st.ToolCalls...)}
	if len(out.ToolCalls) == 0 {
		out.ToolCalls = []toolCall{fallback}
	}
	return out
}

// cutByTokenLimit is the first half of st's words (of its runes, for a
// single word), without tool calls.
func cutByTokenLimit(st step) step {
	text := st.Text
	if text == "" {
		text = maxTokensFallback
	}
	if words := splitWords(text); len(words) > 1 {
		return step{Text: strings.Join(words[:len(words)/2], "")}
	}
	runes := []rune(text)
	return step{Text: string(runes[:max(len(runes)/2, 1)])}
}
