package main

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/livestream"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/workflows"
)

const longTask = "20261130-144409-a1b2c3"

// longResult is a task whose operation ids are as long as real ones: about
// 130 columns each.
func longResult() workflows.TaskResult {
	pr := "acme-tenant:" + longTask + ":github_create_pull_request:pr:create:acme-corporation/payments-service:agent/fix-the-flaky-retry-test:main"
	return workflows.TaskResult{
		TaskID: longTask, WorkflowID: "task-" + longTask, Status: workflows.StatusRunning,
		Turns: []workflows.TurnRecord{{TurnID: longTask + "/t1", Attempts: []workflows.AttemptRecord{{AttemptID: longTask + "/t1/a1", Outcome: model.OutcomeCompleted}}}},
		Operations: []workflows.OperationRecord{
			{OperationID: "acme-tenant:" + longTask + ":github_create_branch:branch:create:acme-corporation/payments-service:agent/fix-the-flaky-retry-test",
				Tool: "github_create_branch", State: capstan.OutcomeSucceeded, ExternalID: "refs/heads/agent/fix-the-flaky-retry-test", Replayed: true},
			{OperationID: "acme-tenant:" + longTask + ":t1:github_get_file:2", Tool: "github_get_file", TurnID: longTask + "/t1", State: capstan.OutcomeSucceeded},
			{OperationID: pr, Tool: "github_create_pull_request", State: capstan.OutcomeNeedsHuman,
				Reason: "could not ask whether the operation took effect: 14 of 14 questions over the 1m0s consistency window failed, the last one at its end: 502"},
		},
		Deliveries: []workflows.DeliveryRecord{{OperationID: "acme-tenant:" + longTask + ":deliver:slack:#payments-team", Target: "slack #payments-team", State: capstan.OutcomeSucceeded, ExternalID: "1764513600.000100"}},
		FinalText:  strings.Repeat("The flaky retry test now waits for the event instead of sleeping. ", 4),
	}
}

func assertFits(t *testing.T, what, out string) {
	t.Helper()
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if n := utf8.RuneCountInString(ansi.ReplaceAllString(l, "")); n > Columns {
			t.Errorf("%s: a line of %d columns:\n%s", what, n, l)
		}
	}
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// TestStatusFitsOneHundredColumns: operations appear by their labels, the
// resolve command one argument a line with the short operation id, and
// no line is wider than 100 columns; --json keeps the full ids.
func TestStatusFitsOneHundredColumns(t *testing.T) {
	t.Parallel()
	res := longResult()
	var out bytes.Buffer
	printResult(&out, res, "http://localhost:8233/namespaces/default/workflows/task-"+longTask)
	t.Logf("\n%s", out.String())
	assertFits(t, "status", out.String())
	for _, want := range []string{
		"\ngithub_create_branch acme-corporation/payments-service agent/fi…  succeeded (replayed)  refs/heads/…\n",
		"github_get_file (t1 #2)",
		"needs a person: operation github_create_pull_request acme-corporation/payments-service",
		"  resolve it: starter resolve " + longTask + " \\\n      pr:create:acme-corporation/payments-service:agent/fix-the-flaky-retry-test:main \\\n      --found URL | --absent | --abort\n",
		"delivery slack #payments-team: succeeded 1764513600.000100",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status does not say %q", want)
		}
	}
	if strings.Contains(out.String(), "acme-tenant:") {
		t.Errorf("status prints a full operation id; they belong to --json")
	}
	var js bytes.Buffer
	if err := printJSON(&js, res); err != nil {
		t.Fatal(err)
	}
	for _, op := range res.Operations {
		if !strings.Contains(js.String(), op.OperationID) {
			t.Errorf("--json lost the operation id %s", op.OperationID)
		}
	}
}

// TestJournalLinesFitOneHundredColumns: run --wait prints the journal with
// the time of day, short attempt ids and operation labels, wrapped.
func TestJournalLinesFitOneHundredColumns(t *testing.T) {
	t.Parallel()
	op := "acme-tenant:" + longTask + ":github_create_pull_request:pr:create:acme-corporation/payments-service:agent/fix-the-flaky-retry-test:main"
	line := "2026-11-30T14:03:22Z operation " + op + " is unknown; reconciling: the request timed out after 30s while " + longTask + "/t2/a1 waited"
	got := shortLine(longTask, line)
	want := "14:03:22 operation [github_create_pull_request acme-corporation/payments-service agent/fix-the-flaky-retry-test main] is unknown; reconciling: the request timed out after 30s while t2/a1 waited"
	if got != want {
		t.Fatalf("shortLine =\n%q\nwant\n%q", got, want)
	}
	lines := wrap(got, Columns, "  ", "      ")
	assertFits(t, "journal", strings.Join(lines, "\n"))
	if joined := strings.Join(strings.Fields(strings.Join(lines, " ")), " "); joined != got {
		t.Errorf("wrapping lost words:\n%q\nwant\n%q", joined, got)
	}
}

func TestWrapBreaksWordsLongerThanALine(t *testing.T) {
	t.Parallel()
	word := strings.Repeat("x", 250)
	lines := wrap("a "+word+" b", 100, "  ", "  ")
	assertFits(t, "wrap", strings.Join(lines, "\n"))
	if got := strings.ReplaceAll(strings.Join(lines, ""), " ", ""); got != "a"+word+"b" {
		t.Errorf("wrap lost characters: %q", got)
	}
}

// TestRetryNoticeCountsDown: the wait before the next attempt, why, and
// which attempt of the budget it is.
func TestRetryNoticeCountsDown(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 14, 3, 22, 0, time.UTC)
	r := workflows.RetryWait{AttemptID: "x/t1/a1", Outcome: model.OutcomeCutIdle, Reason: "the stream was silent for 3s",
		Budget: "idle", Spent: 1, Of: 1, Delay: 4 * time.Second, Until: now.Add(3500 * time.Millisecond)}
	if got, want := retryNotice(r, now), "retrying in 4 s (stream idle 3s, attempt 2/2)"; got != want {
		t.Errorf("retryNotice = %q, want %q", got, want)
	}
	if got, want := retryNotice(r, now.Add(5*time.Second)), "retrying now (stream idle 3s, attempt 2/2)"; got != want {
		t.Errorf("retryNotice after the wait = %q, want %q", got, want)
	}
	r.Outcome, r.Reason, r.Budget, r.Spent, r.Of = model.OutcomeOverloaded, "HTTP 503: overloaded", "overload", 2, 5
	if got, want := retryNotice(r, now), "retrying in 4 s (overloaded: HTTP 503: overloaded, attempt 3/6)"; got != want {
		t.Errorf("retryNotice = %q, want %q", got, want)
	}
}

// TestPlainLiveViewShowsEachTextOnce: a resumed stream repeats bytes the
// view has; they are not shown again. An abandoned attempt is marked with
// its reason; the committed answer is shown once and named to the result.
func TestPlainLiveViewShowsEachTextOnce(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	now := time.Date(2026, 11, 30, 14, 3, 22, 0, time.UTC)
	v := newLiveView(&out, longTask, func() time.Time { return now })
	a1, a2 := longTask+"/t1/a1", longTask+"/t1/a2"
	v.attempt(a1).subscribed = true
	v.text(a1, livestream.Event{Text: "Let me ", From: 0, Next: 7})
	v.text(a1, livestream.Event{Text: "Let me think", From: 0, Next: 12}) // resumed from 0
	v.text(a1, livestream.Event{End: true, From: 12, Next: 12})
	v.apply(workflows.Progress{Attempts: []workflows.AttemptRecord{{AttemptID: a1, Outcome: model.OutcomeCutIdle, Message: "the stream was silent for 3s"}},
		Journal: []string{"2026-11-30T14:03:22Z " + a1 + " abandoned (cut_idle); retrying in 1s: the stream was silent for 3s (idle 1/1)"}})
	v.attempt(a2).subscribed = true
	final := "Done: the test waits for the event."
	v.text(a2, livestream.Event{Text: final, From: 0, Next: len(final)})
	v.text(a2, livestream.Event{End: true, From: len(final), Next: len(final)})
	v.apply(workflows.Progress{Attempts: []workflows.AttemptRecord{
		{AttemptID: a1, Outcome: model.OutcomeCutIdle, Message: "the stream was silent for 3s"},
		{AttemptID: a2, Outcome: model.OutcomeCompleted}}})
	v.clear()

	want := "[t1/a1] Let me think [abandoned: cut_idle: the stream was silent for 3s]\n" +
		"  14:03:22 t1/a1 abandoned (cut_idle); retrying in 1s: the stream was silent for 3s (idle 1/1)\n" +
		"[t1/a2] Done: the test waits for the event. [t1/a2 committed]\n"
	if out.String() != want {
		t.Errorf("plain view =\n%s\nwant\n%s", out.String(), want)
	}
	if got := v.shownFinal(final); got != "t1/a2" {
		t.Errorf("shownFinal = %q, want t1/a2: the answer is on screen and must not be printed again", got)
	}
	var res bytes.Buffer
	writeResult(&res, workflows.TaskResult{TaskID: longTask, Status: workflows.StatusCompleted, FinalText: final}, "ui", v.shownFinal(final))
	if strings.Contains(res.String(), final) {
		t.Errorf("the result repeats the answer shown above:\n%s", res.String())
	}
}

// TestTerminalLiveViewStrikesAnAbandonedAttempt: on a terminal the
// abandoned attempt's text is printed for good struck through, after its
// reason; the live region shows the countdown and the operations table;
// every line fits the width.
func TestTerminalLiveViewStrikesAnAbandonedAttempt(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	now := time.Date(2026, 11, 30, 14, 3, 22, 0, time.UTC)
	v := newLiveView(&out, longTask, func() time.Time { return now })
	v.tty, v.rows = true, 40
	a1 := longTask + "/t1/a1"
	v.attempt(a1).subscribed = true
	text := strings.Repeat("I will read the test and then change the retry loop. ", 5)
	v.text(a1, livestream.Event{Text: text, From: 0, Next: len(text)})
	v.render()
	if !strings.Contains(out.String(), "t1/a1 streaming (265 characters)") {
		t.Errorf("the live region does not tag the streaming attempt:\n%s", out.String())
	}
	v.text(a1, livestream.Event{End: true, From: len(text), Next: len(text)})
	res := longResult()
	v.apply(workflows.Progress{
		Attempts:   []workflows.AttemptRecord{{AttemptID: a1, Outcome: model.OutcomeCutIdle, Message: "the stream was silent for 3s"}},
		Retry:      &workflows.RetryWait{AttemptID: a1, Outcome: model.OutcomeCutIdle, Reason: "the stream was silent for 3s", Spent: 1, Of: 1, Delay: 4 * time.Second, Until: now.Add(4 * time.Second)},
		Operations: res.Operations,
	})
	out.Reset()
	v.render()
	screen := out.String()
	for _, want := range []string{
		"t1/a1 abandoned (cut_idle): the stream was silent for 3s\n",
		"  " + strikeOn + "I will read the test",
		"retrying in 4 s (stream idle 3s, attempt 2/2)",
		"github_create_pull_request acme-corporation/payments-service",
	} {
		if !strings.Contains(screen, want) {
			t.Errorf("the screen does not show %q:\n%s", want, screen)
		}
	}
	if !strings.HasPrefix(screen, "\r\x1b[") || !strings.Contains(screen, eraseDown) {
		t.Errorf("the render does not redraw the live region in place: %q", screen[:min(len(screen), 20)])
	}
	assertFits(t, "terminal view", screen)
}

// TestProgressLineSaysWhatTheTaskWaitsFor: run --wait's line on stderr.
func TestProgressLineSaysWhatTheTaskWaitsFor(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 14, 3, 22, 0, time.UTC)
	a1 := longTask + "/t1/a1"
	op := "acme-tenant:" + longTask + ":github_create_pull_request:pr:create:acme/payments:agent/fix:main"
	cases := []struct {
		p    workflows.Progress
		want string
	}{
		{workflows.Progress{Status: workflows.StatusRunning, Waiting: "waiting 24s for breaker github/write (until 14:03:46 UTC)"},
			"14:03:22 task " + longTask + " running: waiting 24s for breaker github/write (until 14:03:46 UTC)"},
		{workflows.Progress{Status: workflows.StatusNeedsHuman, NeedsHuman: []string{op}},
			"14:03:22 task " + longTask + " needs_human: waits for a person to resolve [github_create_pull_request acme/payments agent/fix main] (starter status " + longTask + ")"},
		{workflows.Progress{Status: workflows.StatusRunning, Attempts: []workflows.AttemptRecord{{AttemptID: a1, Outcome: model.OutcomeOverloaded}},
			Retry: &workflows.RetryWait{AttemptID: a1, Outcome: model.OutcomeOverloaded, Reason: "HTTP 429", Spent: 1, Of: 5, Until: now.Add(12 * time.Second)}},
			"14:03:22 task " + longTask + " running: t1/a1 abandoned, retrying in 12 s (overloaded: HTTP 429, attempt 2/6)"},
		{workflows.Progress{Status: workflows.StatusRunning, Attempts: []workflows.AttemptRecord{{AttemptID: a1, Outcome: model.OutcomeCompleted}}},
			"14:03:22 task " + longTask + " running: 1 model attempts, 0 operations so far"},
	}
	for _, tc := range cases {
		if got := progressLine(longTask, tc.p, now); got != tc.want {
			t.Errorf("progressLine =\n%q\nwant\n%q", got, tc.want)
		}
	}
}

// TestTerminalLiveRegionFitsTheScreen: however many operations and however
// long the text, the live region never holds more lines than the screen,
// so redrawing it in place never runs off the top.
func TestTerminalLiveRegionFitsTheScreen(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 14, 3, 22, 0, time.UTC)
	v := newLiveView(&bytes.Buffer{}, longTask, func() time.Time { return now })
	v.tty, v.rows = true, 24
	a1 := longTask + "/t1/a1"
	v.attempt(a1).subscribed = true
	text := strings.Repeat("A long line of model text that goes on. ", 200)
	v.text(a1, livestream.Event{Text: text, From: 0, Next: len(text)})
	for i := range 40 {
		v.ops = append(v.ops, workflows.OperationRecord{OperationID: "t:" + longTask + ":t1:github_get_file:" + string(rune('a'+i%26)), Tool: "github_get_file", State: capstan.OutcomeSucceeded})
	}
	region := v.liveRegion()
	if len(region) > v.rows-1 {
		t.Errorf("live region of %d lines on a screen of %d rows", len(region), v.rows)
	}
	assertFits(t, "live region", strings.Join(region, "\n"))
}

// A task that ran on workers before the one vocabulary has its states in
// the old spellings in its result; `starter status` prints them in today's
// words, and finds what needs a person all the same.
func TestStatusOfAnOlderTaskPrintsTodaysWords(t *testing.T) {
	t.Parallel()
	old := `{"task_id":"T","workflow_id":"task-T","status":"failed","failure_code":"needs_human_timeout",
		"message":"nobody resolved it","turns":[],
		"operations":[
			{"operation_id":"default:T:github_create_branch:branch:create:acme/app:fix","tool":"github_create_branch","state":"SUCCEEDED","external_id":"refs/heads/fix"},
			{"operation_id":"default:T:github_create_pull_request:pr:create:acme/app:fix:main","tool":"github_create_pull_request","state":"NEEDS_HUMAN","reason":"502 all window"}],
		"deliveries":[
			{"operation_id":"default:T:deliver:slack:#eng","target":"slack:#eng","state":"DEAD_LETTER"},
			{"operation_id":"default:T:deliver:github:acme/app#1","target":"github:acme/app#1","state":"AMBIGUOUS"}]}`
	var res workflows.TaskResult
	if err := json.Unmarshal([]byte(old), &res); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printResult(&out, res, "http://ui")
	for _, want := range []string{"  succeeded    refs/heads/fix\n", "  needs_human\n",
		"needs a person: operation github_create_pull_request", "delivery slack:#eng: failed", "delivery github:acme/app#1: unknown"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status does not say %q:\n%s", want, out.String())
		}
	}
	for _, old := range []string{"SUCCEEDED", "NEEDS_HUMAN", "DEAD_LETTER", "AMBIGUOUS"} {
		if strings.Contains(out.String(), old) {
			t.Errorf("status prints the old spelling %s:\n%s", old, out.String())
		}
	}
}

// TestStatusShowsApprovals: an operation awaiting approval is printed with
// what it would create and the approve and deny commands, one argument a
// line with the short operation id; a denied one with its reason; an
// approved one with who approved it; every line fits.
func TestStatusShowsApprovals(t *testing.T) {
	t.Parallel()
	res := longResult()
	pr := &res.Operations[2]
	pr.State, pr.Reason, pr.Summary = capstan.OutcomeAwaitingApproval, "", "pull request agent/fix-the-flaky-retry-test → main in acme-corporation/payments-service"
	res.Operations = append(res.Operations, workflows.OperationRecord{OperationID: "acme-tenant:" + longTask + ":t1:github_put_file:1",
		Tool: "github_put_file", TurnID: longTask + "/t1", State: capstan.OutcomeDenied, Reason: "denied by bob@host: not during the freeze"})
	res.Operations[0].Approval = &workflows.ApprovalRecord{Decision: workflows.DecisionApproved, By: "mcp:claude-desktop", Note: "branch is fine"}
	var out bytes.Buffer
	printResult(&out, res, "http://localhost:8233/namespaces/default/workflows/task-"+longTask)
	t.Logf("\n%s", out.String())
	assertFits(t, "status", out.String())
	short := "pr:create:acme-corporation/payments-service:agent/fix-the-flaky-retry-test:main"
	for _, want := range []string{
		"awaiting approval: operation github_create_pull_request acme-corporation/payments-service",
		"  approve it: starter approve " + longTask + " \\\n      " + short + "\n",
		"  or deny it: starter deny " + longTask + " \\\n      " + short + " \\\n      --reason TEXT\n",
		"denied: operation github_put_file (t1 #1): denied by bob@host: not during the freeze",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("status does not say %q", want)
		}
	}
	if words := strings.Join(strings.Fields(out.String()), " "); !strings.Contains(words, pr.Summary) {
		t.Errorf("status does not say what waits: %q", pr.Summary)
	}
	approved := "approved: operation " + opLabel(res.TaskID, res.Operations[0]) + " by mcp:claude-desktop: branch is fine"
	if words := strings.Join(strings.Fields(out.String()), " "); !strings.Contains(words, approved) {
		t.Errorf("status does not say who approved: %q", approved)
	}
}
