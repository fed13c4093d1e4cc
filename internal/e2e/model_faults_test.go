package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
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
