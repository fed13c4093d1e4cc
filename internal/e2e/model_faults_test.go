package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/workflows"
)

// The model fault table (issue 8): every fault the sandbox model offers,
// in both wire formats, end to end. Each cell (a fault in one wire format)
// runs the real worker and starter binaries against a sandbox, a task
// queue and a ledger of its own — the model breakers are per worker, so a
// cell's failures never trip another's — and checks the requests the
// sandbox model received, the task's status and failure code, that no
// committed transcript item repeats, and that the text of an abandoned
// attempt never reaches the transcript or the Slack delivery.
const (
	// mfaultIdle and mfaultTotal are the worker's CAPSTAN_MODEL_IDLE_TIMEOUT
	// and CAPSTAN_MODEL_MAX_DURATION: the figures issue 8 states its rows
	// for.
	mfaultIdle  = 3 * time.Second
	mfaultTotal = 8 * time.Second
	// mfaultCellsAtOnce bounds the cells that run together; most of a
	// cell's time is spent waiting on a watchdog or a retry delay.
	mfaultCellsAtOnce = 10
	mfaultChannel     = "#capstan-model-faults"
	// helloText is the hello script's only answer; helloPartial is what a
	// stall or an error event lets out of it first (partialAfter).
	helloText    = "Hello! I'm capstan's sandbox model. This answer needs no tools, so the task ends here."
	helloPartial = "Hello! I'm "
	// helloCut is the first half of helloText's words, as max_tokens
	// streams it, and exhausted what the script says past its last step,
	// which is what a continuation of the hello answer asks for.
	helloCut  = "Hello! I'm capstan's sandbox model. This answer "
	exhausted = "The script has no more steps."
	// turns3Text is the last answer of the turns-3 script.
	turns3Text = "Finished after 3 turns."
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

// mfaultReport is one line of the table.
type mfaultReport struct {
	fault, wire string
	requests    int
	first       string // the first attempt: outcome, phase, HTTP status
	outcome     string
	took        time.Duration // task start to its final outcome
	ran         bool
	failed      bool
}

// TestModelFaultTable runs every row of mfaultRows in both wire formats,
// mfaultCellsAtOnce cells at a time, each t.Run on a goroutine of its own
// (t.Parallel would hold them to GOMAXPROCS), and logs the table: fault ×
// format → requests, outcome, time from task start to its outcome.
//
// Not t.Parallel: its cells already run side by side, mfaultCellsAtOnce
// of them, and rows wait on timeouts of seconds (idle, first event), so
// the table runs while no other test of the package loads the machine.
func TestModelFaultTable(t *testing.T) {
	rows := mfaultRows()
	reports := make([]mfaultReport, len(rows)*len(mfaultWires))
	sem := make(chan struct{}, mfaultCellsAtOnce)
	var wg sync.WaitGroup
	for i, row := range rows {
		for j, wire := range mfaultWires {
			k := i*len(mfaultWires) + j
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				t.Run(row.name+"/"+wire.name, func(t *testing.T) {
					rep := &reports[k]
					*rep = mfaultReport{fault: row.fault, wire: wire.name, outcome: "did not finish", ran: true}
					defer func() { rep.failed = t.Failed() }()
					runModelFaultCell(t, k, row, wire, rep)
				})
			})
		}
	}
	wg.Wait()

	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 1, ' ', tabwriter.Debug)
	fmt.Fprintln(tw, "| fault\t format\t requests\t first abandoned attempt\t outcome (all attempts)\t task start → outcome\t")
	fmt.Fprintln(tw, "|---\t---\t---\t---\t---\t---\t")
	for _, r := range reports {
		if !r.ran {
			continue // filtered out by -run
		}
		outcome := r.outcome
		if r.failed {
			outcome = "CELL FAILED: " + outcome
		}
		fmt.Fprintf(tw, "| %s\t %s\t %d\t %s\t %s\t %s\t\n", r.fault, r.wire, r.requests, r.first, outcome, r.took.Round(100*time.Millisecond))
	}
	_ = tw.Flush()
	t.Logf("model fault table (idle timeout %s, total limit %s):\n%s", mfaultIdle, mfaultTotal,
		strings.ReplaceAll(b.String(), "\t", ""))
}

// runModelFaultCell runs one row in one wire format and fills in its report.
func runModelFaultCell(t *testing.T, k int, row mfaultRow, wire mfaultWire, rep *mfaultReport) {
	sb := startSandbox(t)
	if row.rules != nil {
		for _, r := range row.rules(wire) {
			if err := sb.Model.AddFault(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	if row.overflowThirdTurn {
		sb.Model.SetFault(overflowThirdTurn(t, sb.Model, wire))
	}
	queue := fmt.Sprintf("e2e-mfault-%02d", k)
	env := append(endpointEnv(t, queue, sb),
		"ANTHROPIC_BASE_URL="+sb.AnthropicURL, "ANTHROPIC_API_KEY="+anthropicKey,
		"CAPSTAN_MODEL_IDLE_TIMEOUT="+mfaultIdle.String(), "CAPSTAN_MODEL_MAX_DURATION="+mfaultTotal.String())
	startWorker(t, env)

	script := row.script
	if script == "" {
		script = "hello"
	}
	taskID := fmt.Sprintf("mf%02d-%d", k, time.Now().UnixNano())
	args := []string{"run", "--prompt", "Say hello.", "--slack", mfaultChannel,
		"--model", wire.name + ":" + script, "--id", taskID, "--json"}
	if strings.HasPrefix(script, "turns-") {
		// The script reads capstan-sandbox/demo: the task is sent there,
		// or its policy refuses every read (docs/design.md §5.8).
		args = append(args, "--repo", "capstan-sandbox/demo")
	}
	if row.refuse {
		// The port closes before the task starts, so its first attempt
		// cannot connect.
		if err := sb.Model.AddFault(sandbox.FaultRule{Endpoint: wire.endpoint, Kind: sandbox.FaultRefuseConnection, RefuseFor: 10 * time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	var res workflows.TaskResult
	if row.reopen {
		if r := runStarter(t, env, args...); r.code != 0 {
			t.Fatalf("start: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
		}
		waitForAttempt(t, taskID, model.OutcomeNotSent)
		// A refusal counts its time from when it is added: this one
		// opens the port again at once.
		if err := sb.Model.AddFault(sandbox.FaultRule{Endpoint: wire.endpoint, Kind: sandbox.FaultRefuseConnection, RefuseFor: time.Millisecond}); err != nil {
			t.Fatal(err)
		}
		res = waitResult(t, taskID)
	} else {
		r := runStarter(t, env, append(args, "--wait")...)
		res = decodeResult(t, r)
		if want := map[workflows.Status]int{workflows.StatusCompleted: 0, workflows.StatusFailed: 1}[row.want.status]; r.code != want {
			t.Errorf("starter run --wait exited %d, want %d\nstderr: %s", r.code, want, r.stderr)
		}
	}
	desc, err := describe(context.Background(), workflows.WorkflowID(taskID))
	if err != nil {
		t.Fatal(err)
	}
	info := desc.GetWorkflowExecutionInfo()
	rep.took = info.GetCloseTime().AsTime().Sub(info.GetStartTime().AsTime())

	var requests []sandbox.ModelRequest
	for _, r := range sb.Model.Requests() {
		if r.Endpoint != wire.endpoint {
			t.Errorf("a request reached %s, not the cell's %s", r.Endpoint, wire.endpoint)
		}
		requests = append(requests, r)
	}
	rep.requests = len(requests)
	rep.outcome = string(res.Status)
	if res.FailureCode != "" {
		rep.outcome += " " + string(res.FailureCode)
	}
	var attempts []workflows.AttemptRecord
	for _, turn := range res.Turns {
		attempts = append(attempts, turn.Attempts...)
	}
	rep.outcome += " (" + attemptSummary(attempts) + ")"
	if len(attempts) > 0 {
		a := firstAbandoned(attempts)
		rep.first = fmt.Sprintf("%s, %s", a.Outcome, a.Phase)
		if a.HTTPStatus != 0 {
			rep.first += fmt.Sprintf(", HTTP %d", a.HTTPStatus)
		}
	}
	if row.want.note != "" {
		rep.outcome += "; " + row.want.note
	}
	journal := queryJournal(t, taskID)
	dump := func() string {
		return fmt.Sprintf("result: %+v\nrequests: %+v\njournal:\n%s", res, requests, strings.Join(journal, "\n"))
	}

	w := row.want
	if res.Status != w.status || res.FailureCode != w.code {
		t.Fatalf("task ended %s %q, want %s %q\n%s", res.Status, res.FailureCode, w.status, w.code, dump())
	}
	if len(requests) != w.requests {
		t.Errorf("the sandbox model received %d requests, want %d\n%s", len(requests), w.requests, dump())
	}
	checkAttempts(t, row, attempts, dump)
	checkFaulted(t, row, wire, requests)
	// Every attempt but a refused one reached the sandbox, once.
	reached := 0
	for _, a := range attempts {
		if a.Phase != model.PhaseNotSent {
			reached++
		}
	}
	if reached != len(requests) {
		t.Errorf("%d attempts got past NOT_SENT, but the sandbox model received %d requests\n%s", reached, len(requests), dump())
	}
	if w.gap > 0 && len(requests) >= 2 {
		if gap := requests[1].At.Sub(requests[0].At); gap < w.gap {
			t.Errorf("the second request came %s after the first, before the %s the provider asked for", gap, w.gap)
		} else {
			rep.outcome += fmt.Sprintf("; 2nd request %s after the 1st", gap.Round(100*time.Millisecond))
		}
	}
	all := strings.Join(journal, "\n")
	for _, line := range w.journal {
		if !strings.Contains(all, line) {
			t.Errorf("the journal has no line with %q\n%s", line, dump())
		}
	}
	checkTranscript(t, sb, w, dump)
	checkDelivery(t, sb, res, w)
}

// attemptSummary is the outcomes of attempts, run-length encoded:
// "2× cut_idle".
func attemptSummary(attempts []workflows.AttemptRecord) string {
	var parts []string
	for i := 0; i < len(attempts); {
		j := i
		for j < len(attempts) && attempts[j].Outcome == attempts[i].Outcome {
			j++
		}
		if j-i > 1 {
			parts = append(parts, fmt.Sprintf("%d× %s", j-i, attempts[i].Outcome))
		} else {
			parts = append(parts, string(attempts[i].Outcome))
		}
		i = j
	}
	return strings.Join(parts, ", ")
}

// firstAbandoned is the first attempt that did not complete, or the first
// attempt when all did.
func firstAbandoned(attempts []workflows.AttemptRecord) workflows.AttemptRecord {
	for _, a := range attempts {
		if a.Outcome != model.OutcomeCompleted {
			return a
		}
	}
	return attempts[0]
}

// checkFaulted checks which requests a fault answered: a rule for every
// request struck them all, a rule for one request the first only (the
// overflow row: the third); and the steps they asked for.
func checkFaulted(t *testing.T, row mfaultRow, wire mfaultWire, requests []sandbox.ModelRequest) {
	t.Helper()
	want := make([]sandbox.FaultKind, len(requests))
	switch {
	case row.rules != nil:
		rule := row.rules(wire)[0]
		for i := range want {
			if rule.Times == 0 || i < rule.Times {
				want[i] = rule.Kind
			}
		}
	case row.overflowThirdTurn && len(want) > 2:
		want[2] = sandbox.FaultContextOverflow
	}
	var got, steps []string
	for _, r := range requests {
		got = append(got, string(r.Fault))
		steps = append(steps, fmt.Sprint(r.Step))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("the faults that answered the requests = %q, want %q", got, want)
	}
	if row.want.steps != nil && strings.Join(steps, " ") != strings.Trim(fmt.Sprint(row.want.steps), "[]") {
		t.Errorf("the requests asked for steps %v, want %v", steps, row.want.steps)
	}
}

// checkAttempts compares the attempt records with the row's.
func checkAttempts(t *testing.T, row mfaultRow, attempts []workflows.AttemptRecord, dump func() string) {
	t.Helper()
	w := row.want
	if len(attempts) == 0 {
		t.Fatalf("no attempt recorded\n%s", dump())
	}
	first := firstAbandoned(attempts)
	if first.Phase != w.firstPhase || (w.firstHTTP != 0 && first.HTTPStatus != w.firstHTTP) {
		t.Errorf("first attempt = %+v, want phase %s, HTTP %d\n%s", first, w.firstPhase, w.firstHTTP, dump())
	}
	if row.reopen {
		// Refused until the port opened again, then answered.
		last := len(attempts) - 1
		if last < 1 || last > 4 || attempts[last].Outcome != model.OutcomeCompleted {
			t.Errorf("attempts = %+v, want 1 to 4 not_sent, then completed\n%s", attempts, dump())
		}
		for _, a := range attempts[:max(last, 0)] {
			if a.Outcome != model.OutcomeNotSent || a.Phase != model.PhaseNotSent {
				t.Errorf("attempt %+v before the port opened: want not_sent at NOT_SENT", a)
			}
		}
		return
	}
	got := make([]model.Outcome, len(attempts))
	for i, a := range attempts {
		got[i] = a.Outcome
	}
	if fmt.Sprint(got) != fmt.Sprint(w.outcomes) {
		t.Errorf("attempt outcomes = %v, want %v\n%s", got, w.outcomes, dump())
	}
	// Abandoned attempts of one turn share the phase of the first.
	for _, a := range attempts[1:] {
		if a.Outcome == first.Outcome && a.Outcome != model.OutcomeCompleted && a.Phase != first.Phase {
			t.Errorf("attempt %+v: phase %s, want %s as the first", a, a.Phase, first.Phase)
		}
	}
}

// checkTranscript reads the last request the sandbox model received — the
// whole transcript the task had committed by then — and checks that no
// committed item of it (an answer, a tool result) repeats, and that nothing
// of an abandoned attempt is in it.
func checkTranscript(t *testing.T, sb *sandbox.Sandbox, w mfaultWant, dump func() string) {
	t.Helper()
	last := sb.Model.LastRequest()
	if w.requests == 0 {
		if last != nil {
			t.Errorf("the sandbox model kept a request body although it counted none: %s", last)
		}
		return
	}
	var req struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(last, &req); err != nil || len(req.Messages) == 0 {
		t.Fatalf("the last model request has no messages (%v): %s", err, last)
	}
	seen := map[string]int{}
	for i, m := range req.Messages {
		// Committed items are the model's answers and the tool results;
		// the user messages the workflow adds (the prompt, a request to
		// continue a cut answer) may say the same thing twice.
		var item struct {
			Role string `json:"role"`
		}
		if err := json.Unmarshal(m, &item); err != nil {
			t.Fatal(err)
		}
		if item.Role == "user" && !strings.Contains(string(m), `"tool_result"`) {
			continue
		}
		var c bytes.Buffer
		if err := json.Compact(&c, m); err != nil {
			t.Fatal(err)
		}
		if j, ok := seen[c.String()]; ok {
			t.Errorf("transcript items %d and %d are the same: %s\n%s", j, i, c.String(), dump())
		}
		seen[c.String()] = i
	}
	if w.partial != "" && strings.Contains(string(last), w.partial) {
		t.Errorf("the abandoned attempt's text %q reached the transcript:\n%s", w.partial, last)
	}
}

// checkDelivery checks what reached Slack: for a completed task, the final
// answer, exactly and once, with the abandoned text no more often than the
// answer itself has it; for a failed one, nothing.
func checkDelivery(t *testing.T, sb *sandbox.Sandbox, res workflows.TaskResult, w mfaultWant) {
	t.Helper()
	msgs := sb.Slack.Messages(mfaultChannel)
	if w.status != workflows.StatusCompleted {
		if len(msgs) != 0 || len(res.Deliveries) != 0 {
			t.Errorf("a failed task delivered %+v (records %+v), want nothing", msgs, res.Deliveries)
		}
		return
	}
	if res.FinalText != w.final {
		t.Errorf("final text = %q, want %q", res.FinalText, w.final)
	}
	if len(msgs) != 1 || len(res.Deliveries) != 1 || res.Deliveries[0].State != capstan.OutcomeSucceeded {
		t.Fatalf("slack messages = %+v, deliveries = %+v; want one message, succeeded", msgs, res.Deliveries)
	}
	text := msgs[0].Text
	if text != w.final || strings.Count(text, w.final) != 1 {
		t.Errorf("delivered %q, want the final answer %q exactly once", text, w.final)
	}
	if w.partial != "" && strings.Count(text, w.partial) != strings.Count(w.final, w.partial) {
		t.Errorf("the abandoned attempt's text %q reached the delivery: %q", w.partial, text)
	}
}

// waitForAttempt polls the task's status until an attempt has ended with
// outcome: the status query answers what the task has done so far, and
// there is no event to wait on.
func waitForAttempt(t *testing.T, taskID string, outcome model.Outcome) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		v, err := temporal.QueryWorkflow(ctx, workflows.WorkflowID(taskID), "", workflows.QueryStatus)
		cancel()
		if err == nil {
			var st workflows.TaskResult
			if err := v.Get(&st); err != nil {
				t.Fatal(err)
			}
			for _, turn := range st.Turns {
				for _, a := range turn.Attempts {
					if a.Outcome == outcome {
						return
					}
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s recorded no %s attempt within a minute (last query error: %v)", taskID, outcome, err)
		}
		<-poll.C
	}
}

// overflowThirdTurn is a sandbox Fault that lets every request through and,
// on the first request with one assistant message (the second turn's), adds
// a context_overflow rule for requests longer than it: the third turn's
// request, which carries one more exchange, overflows once; the compaction's
// summary call, which carries no tools, and the third turn asked again,
// after the rule is spent, do not.
func overflowThirdTurn(t *testing.T, m *sandbox.Model, wire mfaultWire) sandbox.Fault {
	var once sync.Once
	return func(_ http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("read a model request: %v", err)
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		if json.Unmarshal(body, &req) != nil {
			return false
		}
		assistants := 0
		for _, msg := range req.Messages {
			if msg.Role == "assistant" {
				assistants++
			}
		}
		if assistants == 1 {
			once.Do(func() {
				if err := m.AddFault(sandbox.FaultRule{Endpoint: wire.endpoint, Kind: sandbox.FaultContextOverflow, Times: 1,
					PromptBytesOver: len(body)}); err != nil {
					t.Errorf("add the overflow rule: %v", err)
				}
			})
		}
		return false
	}
}
