package main

import (
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/livestream"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/workflows"
)

// ANSI sequences of the terminal view.
const (
	strikeOn  = "\x1b[9m"
	styleOff  = "\x1b[0m"
	eraseDown = "\x1b[J"
)

// settleGrace bounds how long a settled attempt waits for the rest of its
// stream before it is printed with what arrived.
const settleGrace = 2 * time.Second

// liveView is what `starter follow` shows: each attempt's text as it
// streams, tagged with its attempt id; an abandoned attempt's text struck
// through (on a terminal) or marked "[abandoned: reason]" (plain text),
// with its reason; the retry countdown; the operations table. It never
// shows a text twice: an attempt's bytes are kept by offset, and an
// attempt is printed for good once, when the workflow has settled it.
//
// On a terminal the view has two parts: lines printed for good (journal
// lines, settled attempts) and a live region below them, redrawn in place.
// Without a terminal everything is appended: text as it arrives, markers
// when attempts settle, journal lines.
type liveView struct {
	out    io.Writer
	tty    bool
	width  int // columns, at most Columns
	rows   int // terminal rows, bounding the live region
	taskID string
	now    func() time.Time

	attempts  map[string]*attemptView
	order     []string
	retry     *workflows.RetryWait
	retrySeen map[string]time.Time // when the view first saw each retry
	ops       []workflows.OperationRecord
	waiting   string
	human     []string
	looking   []string // what each pending reconciler looks for, until when

	pending   []string // terminal: lines to print for good at the next render
	liveLines int      // terminal: lines of the live region on screen
	dirty     bool

	plainAt  string // plain: the attempt whose text the last line holds
	plainCol int    // plain: columns used on the last line

	// lastCommitted is the last committed attempt shown with its text.
	lastCommitted *attemptView
	// lookup, when set, asks the hubs seen so far for the text of an
	// attempt that settled before the view could subscribe to it (it ran
	// between two polls); it reports whether it started looking.
	lookup func(attemptID string) bool
}

// attemptView is one attempt as the follower knows it.
type attemptView struct {
	id, short  string
	text       strings.Builder
	received   int  // bytes of text received, the offset of the next delta
	subscribed bool // its stream is being read
	streamDone bool // its stream ended (or was given up)
	truncated  bool
	settled    bool
	outcome    model.Outcome
	reason     string
	settledAt  time.Time
	printed    bool // printed for good
}

func newLiveView(out io.Writer, taskID string, now func() time.Time) *liveView {
	v := &liveView{out: out, width: Columns, rows: 24, taskID: taskID, now: now, attempts: map[string]*attemptView{}, retrySeen: map[string]time.Time{}}
	if cols, rows, ok := terminalSize(out); ok {
		v.tty, v.width, v.rows = true, min(cols, Columns), rows
	}
	return v
}

// attempt returns the attempt, known from now on.
func (v *liveView) attempt(id string) *attemptView {
	a, ok := v.attempts[id]
	if !ok {
		a = &attemptView{id: id, short: shortAttempt(v.taskID, id)}
		v.attempts[id] = a
		v.order = append(v.order, id)
		v.dirty = true
	}
	return a
}

// text takes one event of an attempt's stream. Bytes it already has are
// dropped, so a resumed stream never shows text twice.
func (v *liveView) text(id string, ev livestream.Event) {
	a := v.attempt(id)
	if ev.Truncated {
		a.truncated = true
	}
	if ev.End {
		a.streamDone = true
		v.dirty = true
		return
	}
	if a.printed || ev.Next <= a.received || ev.From > a.received {
		return // already shown, or a gap the resumed stream will fill
	}
	delta := printable(ev.Text[a.received-ev.From:])
	a.text.WriteString(delta)
	a.received = ev.Next
	v.dirty = true
	if !v.tty {
		v.plainText(a, delta)
	}
}

// apply takes a progress answer of the workflow.
func (v *liveView) apply(p workflows.Progress) {
	v.settle(p.Attempts)
	v.retry, v.ops, v.waiting, v.human = p.Retry, cleanOperations(p.Operations), clean(p.Waiting), cleanAll(p.NeedsHuman)
	if r := p.Retry; r != nil {
		r.Reason = clean(r.Reason)
		if _, ok := v.retrySeen[r.AttemptID]; !ok {
			v.retrySeen[r.AttemptID] = v.now()
		}
	}
	v.flushSettled(false)
	for _, l := range p.Journal {
		v.permanent(wrap(shortLine(v.taskID, clean(l)), v.width, "  ", "      ")...)
	}
	v.dirty = true
}

// settle marks the attempts the workflow has settled.
func (v *liveView) settle(records []workflows.AttemptRecord) {
	for _, r := range records {
		a := v.attempt(r.AttemptID)
		if a.settled {
			continue
		}
		a.settled, a.outcome, a.reason, a.settledAt = true, r.Outcome, clean(r.Message), v.now()
		if !a.subscribed && v.lookup != nil && v.lookup(a.id) {
			a.subscribed = true
		}
		if !a.subscribed {
			a.streamDone = true
		}
	}
}

// flushSettled prints for good each settled attempt whose stream is over
// (or has had settleGrace to end; all of them when final), in order.
func (v *liveView) flushSettled(final bool) {
	for _, id := range v.order {
		a := v.attempts[id]
		if a.printed || !a.settled {
			continue
		}
		if !a.streamDone && !final && v.now().Sub(a.settledAt) < settleGrace {
			return // keep the order: later attempts wait for this one
		}
		v.printSettled(a)
	}
}

// printSettled prints a settled attempt for good: struck through with its
// reason when abandoned, as it is when committed.
func (v *liveView) printSettled(a *attemptView) {
	a.printed = true
	text := a.text.String()
	if a.truncated {
		text += " […]"
	}
	committed := a.outcome == model.OutcomeCompleted
	if committed && strings.TrimSpace(text) != "" {
		v.lastCommitted = a
	}
	if !v.tty {
		v.plainEnd(a, committed)
		return
	}
	if committed {
		if strings.TrimSpace(text) == "" {
			return // a turn of tool calls only: the journal says so
		}
		v.permanent(a.short + " committed:")
		v.permanent(wrap(text, v.width, "  ", "  ")...)
		return
	}
	v.permanent(wrap(fmt.Sprintf("%s abandoned (%s): %s", a.short, a.outcome, a.reason), v.width, "", "  ")...)
	if strings.TrimSpace(text) == "" {
		return
	}
	for _, l := range wrap(text, v.width, "  ", "  ") {
		v.permanent("  " + strikeOn + strings.TrimPrefix(l, "  ") + styleOff)
	}
}

// permanent queues lines printed for good (terminal) or prints them
// (plain).
func (v *liveView) permanent(lines ...string) {
	if v.tty {
		v.pending = append(v.pending, lines...)
		return
	}
	v.plainBreak()
	for _, l := range lines {
		fmt.Fprintln(v.out, l)
	}
}

// render redraws the terminal: the lines printed for good since the last
// render, then the live region in place of the old one.
func (v *liveView) render() {
	if !v.tty || (!v.dirty && !v.countingDown()) {
		return
	}
	v.dirty = false
	var b strings.Builder
	if v.liveLines > 0 {
		fmt.Fprintf(&b, "\r\x1b[%dA", v.liveLines)
	}
	b.WriteString(eraseDown)
	for _, l := range v.pending {
		b.WriteString(l + "\n")
	}
	v.pending = nil
	live := v.liveRegion()
	for _, l := range live {
		b.WriteString(l + "\n")
	}
	v.liveLines = len(live)
	_, _ = io.WriteString(v.out, b.String())
}

// clear erases the live region, printing what waits to be printed for good.
func (v *liveView) clear() {
	if !v.tty {
		v.plainBreak()
		return
	}
	var b strings.Builder
	if v.liveLines > 0 {
		fmt.Fprintf(&b, "\r\x1b[%dA", v.liveLines)
	}
	b.WriteString(eraseDown)
	for _, l := range v.pending {
		b.WriteString(l + "\n")
	}
	v.pending, v.liveLines = nil, 0
	_, _ = io.WriteString(v.out, b.String())
}

// liveRegion is what changes: the attempts streaming now, the retry
// countdown, what the task waits for, the operations table.
func (v *liveView) liveRegion() []string {
	var out []string
	textRows := max(3, v.rows-12)
	for _, id := range v.order {
		a := v.attempts[id]
		if a.printed {
			continue
		}
		state := "streaming"
		if a.settled {
			state = string(a.outcome)
		}
		out = append(out, cut(fmt.Sprintf("%s %s (%d characters)", a.short, state, width(a.text.String())), v.width))
		lines := wrap(a.text.String(), v.width, "  ", "  ")
		if a.text.Len() == 0 {
			lines = nil
		}
		if len(lines) > textRows {
			lines = append([]string{"  …"}, lines[len(lines)-textRows+1:]...)
		}
		out = append(out, lines...)
	}
	if l := v.retryLine(); l != "" {
		out = append(out, cut(l, v.width))
	}
	if v.waiting != "" {
		out = append(out, cut(v.waiting, v.width))
	}
	for _, l := range v.looking {
		out = append(out, cut(clean(l), v.width))
	}
	for _, id := range v.human {
		out = append(out, cut("needs a person: "+shortLine(v.taskID, id)+" (starter status "+v.taskID+")", v.width))
	}
	if len(v.ops) > 0 {
		ops := v.ops
		shown := max(3, v.rows/3)
		if len(ops) > shown {
			out = append(out, fmt.Sprintf("(%d earlier operations: starter status %s)", len(ops)-shown, v.taskID))
			ops = ops[len(ops)-shown:]
		}
		rows := [][]string{{"OPERATION", "STATE"}}
		for _, op := range ops {
			rows = append(rows, []string{opLabel(v.taskID, op), string(op.State)})
		}
		out = append(out, table(rows, v.width, 0)...)
	}
	// The region is redrawn by moving the cursor up over it, which cannot
	// go above the top of the screen: it never holds more lines than fit.
	if limit := max(v.rows-1, 1); len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}

// countingDown: a retry countdown is on screen and changes every second.
func (v *liveView) countingDown() bool { return v.retryLine() != "" }

// retryLine is the countdown to the next attempt, while the guard waits
// for it: "retrying in 4 s (stream idle 3s, attempt 2/2)".
func (v *liveView) retryLine() string {
	r := v.retry
	if r == nil {
		return ""
	}
	// Once a later attempt is known the wait is over.
	if n := len(v.order); n == 0 || v.order[n-1] != r.AttemptID {
		return ""
	}
	// The journal gives the decision's time to the second, so the wait
	// ends within a second after its Until, and no later than the delay
	// after the view first saw it.
	w := *r
	w.Until = w.Until.Add(time.Second)
	if seen, ok := v.retrySeen[r.AttemptID]; ok && seen.Add(r.Delay).Before(w.Until) {
		w.Until = seen.Add(r.Delay)
	}
	return retryNotice(w, v.now())
}

var silentFor = regexp.MustCompile(`silent for (\S+)$`)

// retryNotice says how long until the next attempt and why.
func retryNotice(r workflows.RetryWait, now time.Time) string {
	why := string(r.Outcome) + ": " + r.Reason
	if m := silentFor.FindStringSubmatch(r.Reason); m != nil && r.Outcome == model.OutcomeCutIdle {
		why = "stream idle " + m[1]
	}
	if r.Of > 0 {
		why += fmt.Sprintf(", attempt %d/%d", r.Spent+1, r.Of+1)
	}
	left := r.Until.Sub(now)
	if left <= 0 {
		return fmt.Sprintf("retrying now (%s)", why)
	}
	return fmt.Sprintf("retrying in %d s (%s)", int((left+time.Second-1)/time.Second), why)
}

// plainText appends text of a to plain output, wrapped at the width, with
// the attempt's tag whenever its text starts a line after something else.
func (v *liveView) plainText(a *attemptView, text string) {
	var b strings.Builder
	if v.plainAt != a.id {
		v.plainBreak()
		tag := "[" + a.short + "] "
		b.WriteString(tag)
		v.plainAt, v.plainCol = a.id, width(tag)
	}
	for _, r := range text {
		switch {
		case r == '\n':
			b.WriteByte('\n')
			v.plainCol = 0
			continue
		case v.plainCol >= v.width:
			b.WriteByte('\n')
			v.plainCol = 0
		}
		b.WriteRune(r)
		v.plainCol++
	}
	_, _ = io.WriteString(v.out, b.String())
}

// plainEnd marks a settled attempt in plain output.
func (v *liveView) plainEnd(a *attemptView, committed bool) {
	if a.received == 0 && committed {
		return
	}
	var mark string
	switch {
	case committed:
		mark = "[" + a.short + " committed]"
	case a.received == 0:
		mark = fmt.Sprintf("[%s abandoned (%s): %s]", a.short, a.outcome, a.reason)
	default:
		mark = fmt.Sprintf("[abandoned: %s: %s]", a.outcome, a.reason)
	}
	if v.plainAt == a.id && v.plainCol > 0 && v.plainCol+1+width(mark) <= v.width {
		fmt.Fprintln(v.out, " "+mark)
		v.plainAt, v.plainCol = "", 0
		return
	}
	v.plainBreak()
	for _, l := range wrap(mark, v.width, "", "  ") {
		fmt.Fprintln(v.out, l)
	}
}

// plainBreak ends a line of streamed text before other output.
func (v *liveView) plainBreak() {
	if v.plainCol > 0 {
		fmt.Fprintln(v.out)
	}
	v.plainAt, v.plainCol = "", 0
}

// shownFinal names the attempt whose committed text, shown above, is the
// task's final answer; empty when the answer was not shown.
func (v *liveView) shownFinal(final string) string {
	a := v.lastCommitted
	if a == nil || final == "" || a.truncated || strings.TrimSpace(a.text.String()) != strings.TrimSpace(printable(final)) {
		return ""
	}
	return a.short
}

// printable is model text for the live view: cleaned of escape sequences
// and control characters (clean), so it can neither move the cursor nor
// restyle the terminal, with tabs as spaces so that columns count true.
func printable(s string) string {
	return strings.ReplaceAll(clean(s), "\t", " ")
}
