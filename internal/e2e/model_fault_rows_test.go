package e2e

import (
	"time"

	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// mfaultWire is one wire format as a cell uses it.
type mfaultWire struct {
	name     string // "openai" or "anthropic": the provider of --model
	endpoint string // the sandbox model's fault-rule endpoint
	// partialAfter is the after_events that lets helloPartial out: OpenAI
	// sends a role chunk, then a chunk per word; Anthropic message_start,
	// ping and content_block_start, then a text_delta per word.
	partialAfter int
}

var mfaultWires = []mfaultWire{
	{name: "openai", endpoint: "chat/completions", partialAfter: 3},
	{name: "anthropic", endpoint: "messages", partialAfter: 5},
}

// mfaultRow is one fault of the table.
type mfaultRow struct {
	name   string // subtest name
	fault  string // as the table prints it
	script string // the sandbox script the task plays; "hello" when empty
	// rules are the fault rules put on the cell's endpoint before the
	// task starts.
	rules func(w mfaultWire) []sandbox.FaultRule
	// refuse closes the model's port (refuse_connection) for the whole
	// task; reopen opens it again once the first attempt has been refused.
	refuse, reopen bool
	// overflowThirdTurn strikes the third turn's first request with a
	// context overflow: a prompt_bytes_over rule sized by the second
	// turn's request, so only a longer prompt overflows.
	overflowThirdTurn bool
	want              mfaultWant
}

// mfaultWant is what a row must end with, in either wire format.
type mfaultWant struct {
	requests int // exactly, as the sandbox model counted them
	status   workflows.Status
	code     workflows.FailureCode
	// outcomes are the outcomes of every attempt of every turn, in order.
	// firstPhase and firstHTTP (0: not checked) are the phase and status
	// of the first attempt that did not complete, or of the first attempt
	// when all did.
	outcomes   []model.Outcome
	firstPhase model.Phase
	firstHTTP  int
	// steps, when set, are the script steps the requests asked for, in
	// order (a compaction's summary call, sent no assistant message, asks
	// for step 0).
	steps []int
	// gap is the least time between the first two requests.
	gap time.Duration
	// final is the text delivered, exactly, when the task completes.
	final string
	// partial is text an abandoned attempt streamed before it was cut: it
	// must reach neither the transcript nor the delivery.
	partial string
	journal []string // lines the journal must contain
	note    string   // printed in the table's outcome column
}

func mfaultRepeat(o model.Outcome, n int) []model.Outcome {
	out := make([]model.Outcome, n)
	for i := range out {
		out[i] = o
	}
	return out
}

// mfaultRule is a rule on the cell's endpoint.
func mfaultRule(kind sandbox.FaultKind, times int, set func(r *sandbox.FaultRule)) func(mfaultWire) []sandbox.FaultRule {
	return func(w mfaultWire) []sandbox.FaultRule {
		r := sandbox.FaultRule{Endpoint: w.endpoint, Kind: kind, Times: times}
		if set != nil {
			set(&r)
		}
		if kind == sandbox.FaultStall || kind == sandbox.FaultOverloadedEvent || kind == sandbox.FaultRateLimitEvent {
			r.AfterEvents = w.partialAfter
		}
		return []sandbox.FaultRule{r}
	}
}

func mfaultRows() []mfaultRow {
	const (
		completed  = model.OutcomeCompleted
		cutIdle    = model.OutcomeCutIdle
		overloaded = model.OutcomeOverloaded
		invalid    = model.OutcomeInvalid
	)
	ok := workflows.StatusCompleted
	failed := workflows.StatusFailed
	status := func(code int, retryAfter, retryAfterMsHeader time.Duration) func(*sandbox.FaultRule) {
		return func(r *sandbox.FaultRule) {
			r.Status, r.RetryAfter, r.RetryAfterMsHeader = code, retryAfter, retryAfterMsHeader
		}
	}
	overloadedOnce := func(code int, gap time.Duration) mfaultWant {
		return mfaultWant{requests: 2, status: ok, outcomes: []model.Outcome{overloaded, completed},
			firstPhase: model.PhaseHeadersReceived, firstHTTP: code, gap: gap, final: helloText}
	}
	return []mfaultRow{
		// The rows issue 8 states figures for.
		{name: "stall_every", fault: "stall after partial output, every request",
			rules: mfaultRule(sandbox.FaultStall, 0, nil),
			want: mfaultWant{requests: 2, status: failed, code: workflows.FailModelIdleTimeout, outcomes: mfaultRepeat(cutIdle, 2),
				firstPhase: model.PhaseStreamPartial, partial: helloPartial}},
		{name: "hold_headers_every", fault: "headers never sent, every request",
			rules: mfaultRule(sandbox.FaultHoldHeaders, 0, nil),
			want: mfaultWant{requests: 2, status: failed, code: workflows.FailModelIdleTimeout, outcomes: mfaultRepeat(cutIdle, 2),
				firstPhase: model.PhaseSentNoHeaders}},
		{name: "endless_every", fault: "endless stream, every request",
			rules: mfaultRule(sandbox.FaultEndless, 0, nil),
			want: mfaultWant{requests: 1, status: failed, code: workflows.FailModelMaxDuration, outcomes: []model.Outcome{model.OutcomeCutTotal},
				firstPhase: model.PhaseStreamPartial, partial: "more more"}},
		{name: "status_429_retry_after_2s_once", fault: "429, Retry-After: 2, once",
			rules: mfaultRule(sandbox.FaultStatus, 1, status(429, 2*time.Second, 0)),
			want:  overloadedOnce(429, 2*time.Second)},
		{name: "stall_once", fault: "stall after partial output, once",
			rules: mfaultRule(sandbox.FaultStall, 1, nil),
			want: mfaultWant{requests: 2, status: ok, outcomes: []model.Outcome{cutIdle, completed},
				firstPhase: model.PhaseStreamPartial, final: helloText, partial: helloPartial}},
		{name: "context_overflow_once", fault: "context overflow at turn 3, once (turns-3)", script: "turns-3",
			overflowThirdTurn: true,
			// Turns 1 and 2; turn 3 overflows, its compaction (k1)
			// completes, and turn 3 is asked again. The sandbox picks its
			// step by the assistant messages it is sent, and the summary
			// took the place of the first one, so turn 3 replays step 2
			// (read README.md) and a fourth turn gives the last answer.
			want: mfaultWant{requests: 6, status: ok, steps: []int{0, 1, 2, 0, 1, 2},
				outcomes:   []model.Outcome{completed, completed, model.OutcomeOverflow, completed, completed, completed},
				firstPhase: model.PhaseHeadersReceived, firstHTTP: 400, final: turns3Text,
				journal: []string{"abandoned (overflow)", "compacting the transcript (round 1/3)", "earlier transcript items summarized"},
				note:    "incl. 1 compaction call; 4 turns, as the sandbox replays step 2 after it"}},

		// Every other fault.
		{name: "refuse_connection_throughout", fault: "connection refused throughout",
			refuse: true,
			want: mfaultWant{requests: 0, status: failed, code: workflows.FailProviderUnavailable, outcomes: mfaultRepeat(model.OutcomeNotSent, 5),
				firstPhase: model.PhaseNotSent}},
		{name: "refuse_connection_then_open", fault: "connection refused until the first attempt failed",
			refuse: true, reopen: true,
			// The not_sent attempts before the port reopened number 1
			// to 4 (their retry delays are jittered); checked apart.
			want: mfaultWant{requests: 1, status: ok, firstPhase: model.PhaseNotSent, final: helloText}},
		{name: "reset_connection_once", fault: "connection reset after the request, once",
			rules: mfaultRule(sandbox.FaultResetConnection, 1, nil),
			want: mfaultWant{requests: 2, status: ok, outcomes: []model.Outcome{model.OutcomeUnknown, completed},
				firstPhase: model.PhaseSentNoHeaders, final: helloText}},
		{name: "status_503_once", fault: "503, once",
			rules: mfaultRule(sandbox.FaultStatus, 1, status(503, 0, 0)), want: overloadedOnce(503, 0)},
		{name: "status_503_retry_after_ms_once", fault: "503, retry-after-ms: 700, once",
			rules: mfaultRule(sandbox.FaultStatus, 1, status(503, 0, 700*time.Millisecond)), want: overloadedOnce(503, 700*time.Millisecond)},
		{name: "status_529_once", fault: "529, once",
			rules: mfaultRule(sandbox.FaultStatus, 1, status(529, 0, 0)), want: overloadedOnce(529, 0)},
		{name: "status_529_retry_after_ms_once", fault: "529, retry-after-ms: 700, once",
			rules: mfaultRule(sandbox.FaultStatus, 1, status(529, 0, 700*time.Millisecond)), want: overloadedOnce(529, 700*time.Millisecond)},
		{name: "overloaded_event_once", fault: "overload error event mid-stream, once",
			rules: mfaultRule(sandbox.FaultOverloadedEvent, 1, nil),
			want: mfaultWant{requests: 2, status: ok, outcomes: []model.Outcome{overloaded, completed},
				firstPhase: model.PhaseStreamPartial, firstHTTP: 200, final: helloText, partial: helloPartial}},
		{name: "rate_limit_event_once", fault: "rate-limit error event mid-stream, once",
			rules: mfaultRule(sandbox.FaultRateLimitEvent, 1, nil),
			want: mfaultWant{requests: 2, status: ok, outcomes: []model.Outcome{overloaded, completed},
				firstPhase: model.PhaseStreamPartial, firstHTTP: 200, final: helloText, partial: helloPartial}},
		{name: "empty_once", fault: "empty completion, once",
			rules: mfaultRule(sandbox.FaultEmpty, 1, nil),
			want: mfaultWant{requests: 2, status: ok, outcomes: []model.Outcome{invalid, completed},
				firstPhase: model.PhaseStreamCompleted, final: helloText}},
		{name: "empty_every", fault: "empty completion, every request",
			rules: mfaultRule(sandbox.FaultEmpty, 0, nil),
			want: mfaultWant{requests: 3, status: failed, code: workflows.FailModelInvalidOutput, outcomes: mfaultRepeat(invalid, 3),
				firstPhase: model.PhaseStreamCompleted}},
		{name: "malformed_arguments_once", fault: "malformed tool-call JSON, once",
			rules: mfaultRule(sandbox.FaultMalformedArguments, 1, nil),
			want: mfaultWant{requests: 2, status: ok, outcomes: []model.Outcome{invalid, completed},
				firstPhase: model.PhaseStreamCompleted, final: helloText}},
		{name: "unknown_tool_once", fault: "call to an unknown tool, once",
			rules: mfaultRule(sandbox.FaultUnknownTool, 1, nil),
			want: mfaultWant{requests: 2, status: ok, outcomes: []model.Outcome{invalid, completed},
				firstPhase: model.PhaseStreamCompleted, final: helloText}},
		{name: "max_tokens_once", fault: "answer cut by the token limit, once",
			rules: mfaultRule(sandbox.FaultMaxTokens, 1, nil),
			// The cut half is committed, and continuation c1 (the script's
			// next step) completes it.
			want: mfaultWant{requests: 2, status: ok, outcomes: mfaultRepeat(completed, 2),
				firstPhase: model.PhaseStreamCompleted, final: helloCut + exhausted,
				journal: []string{"asking the model to continue it (continuation 1/2)", "the answer is complete after 1 continuation(s)"},
				note:    "answer + 1 continuation"}},
		{name: "max_tokens_every", fault: "answer cut by the token limit, every request",
			rules: mfaultRule(sandbox.FaultMaxTokens, 0, nil),
			want: mfaultWant{requests: 3, status: failed, code: workflows.FailModelOutputTruncated, outcomes: mfaultRepeat(completed, 3),
				firstPhase: model.PhaseStreamCompleted,
				journal:    []string{"continuation 2/2", "still cut by the output token limit after 2 continuations"},
				note:       "answer + 2 continuations"}},
	}
}
