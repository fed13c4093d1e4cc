package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/livestream"
	"github.com/capstanhq/capstan/internal/workflows"
)

func TestCleanStripsEscapeSequencesAndControls(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"plain text\nwith a\ttab", "plain text\nwith a\ttab"},
		{"\x1b[2J\x1b[1;31mred\x1b[0m", "red"},
		{"\x1b[?1049h\x1b[H alt screen", " alt screen"},
		{"title \x1b]0;owned\x07 bell-terminated", "title  bell-terminated"},
		{"link \x1b]8;;http://evil.example\x1b\\text\x1b]8;;\x1b\\", "link text"},
		{"dcs \x1bPq#0;2;0;0;0\x1b\\ done", "dcs  done"},
		{"c1 \u009b31mcsi \u009d0;t\u009c osc", "c1 csi  osc"},
		{"keypad \x1b= and \x1b(B charset", "keypad  and  charset"},
		{"erase\x08\x08\x08 bell\x07 cr\r\n nul\x00 del\x7f", "erase bell cr\n nul del"},
		{"cut short \x1b[31", "cut short "},
		{"unterminated \x1b]0;title\nnext line", "unterminated \nnext line"},
		{"\x1b", ""},
		{"bad utf-8 \xff\xfe", "bad utf-8 \ufffd\ufffd"},
		{"unicode é ✓ stays", "unicode é ✓ stays"},
	} {
		if got := clean(tc.in); got != tc.want {
			t.Errorf("clean(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// hasControl reports a control character other than newline and tab.
func hasControl(s string) bool {
	return strings.IndexFunc(s, func(r rune) bool {
		return (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f)
	}) >= 0
}

// TestResultPrintsNoEscapeSequences: status and run --wait print a result
// whose every text field carries a sequence, and print none of them.
func TestResultPrintsNoEscapeSequences(t *testing.T) {
	t.Parallel()
	evil := "\x1b]0;owned\x07\x1b[2J"
	res := workflows.TaskResult{
		TaskID: "t-1", Status: workflows.StatusFailed, Message: "boom" + evil, Waiting: "breaker" + evil,
		FailureCode: workflows.FailProviderRejected,
		FinalText:   "answer" + evil + " \x1b[31mred\x1b[0m",
		Operations: []workflows.OperationRecord{{
			OperationID: "default:t-1:github_create_branch:acme/x:br" + evil, State: capstan.OutcomeNeedsHuman,
			ExternalID: "sha" + evil, Reason: "why" + evil,
		}},
		Deliveries: []workflows.DeliveryRecord{{OperationID: "default:t-1:deliver:slack", Target: "#c" + evil, State: capstan.OutcomeSucceeded, ExternalID: "ts" + evil}},
	}
	var out bytes.Buffer
	printResult(&out, res, "http://ui")
	if hasControl(out.String()) || strings.Contains(out.String(), "owned") {
		t.Errorf("printResult printed a control sequence:\n%q", out.String())
	}
	for _, want := range []string{"answer red", "boom", "breaker", "why", "#c"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printResult lost %q:\n%s", want, out.String())
		}
	}
	var js bytes.Buffer
	if err := printJSON(&js, res); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `answer\u001b]0;owned\u0007\u001b[2J`) {
		t.Errorf("--json does not keep the final answer exactly:\n%s", js.String())
	}
}

// TestLiveViewPrintsNoEscapeSequences: the live view's journal lines,
// reasons and streamed text reach the terminal cleaned.
func TestLiveViewPrintsNoEscapeSequences(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	v := newLiveView(&out, "t-1", time.Now)
	v.apply(workflows.Progress{
		Journal:  []string{"2026-01-02T03:04:05Z t-1/t1/a1 abandoned (overloaded): down\x1b]0;owned\x07\x1b[2J now"},
		Attempts: []workflows.AttemptRecord{{AttemptID: "t-1/t1/a1", Outcome: "overloaded", Message: "down\x1b[2J now"}},
		Waiting:  "breaker\x1b[5m",
	})
	v.text("t-1/t1/a2", livestream.Event{Text: "streamed \x1b[31mred\x1b[0m\ttext", Next: 28})
	v.flushSettled(true)
	v.clear()
	if hasControl(out.String()) || strings.Contains(out.String(), "owned") {
		t.Errorf("the live view printed a control sequence:\n%q", out.String())
	}
	if !strings.Contains(out.String(), "down now") || !strings.Contains(out.String(), "streamed red text") {
		t.Errorf("the live view lost the text around the sequences:\n%s", out.String())
	}
}
