package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/logids"
	"github.com/capstanhq/capstan/internal/model"
)

// This file holds transcript compaction (docs/design.md §4.4, overflow): what
// a transcript that no longer fits the model's context gives up, and the
// items that say so. The summary is written by a ModelTurn with Compact
// set, so it runs under the provider's breaker and the attempt's watchdogs;
// TruncateTranscript is the fallback when that call fails.

// compactItemLimit bounds each item as the summary request shows it, in
// characters: a transcript that overflowed would overflow the summary
// request too if every tool output went in whole.
const compactItemLimit = 4000

// summarizerPrompt is the system message of a summary call.
const summarizerPrompt = "You compress the transcript of an agent's work so that it fits the model's context again. " +
	"Summarize the items below: what was asked, what was done (every tool call that changed something, with its result and any URL or id it returned), " +
	"what was learned, and what is still open. Be factual and brief; do not invent anything. Answer with the summary only."

// compactionSpan returns the range [from, to) of a transcript's messages
// that compaction may replace: everything between the task's opening (its
// system messages and the first user message, the prompt) and its newest
// exchange (the last assistant message and everything after it: the tool
// results of its calls and the items appended since, which the model has
// not read yet). A tool result is committed only once its operation is
// settled, and the newest exchange is kept whole, so compaction never drops
// a tool result the model has not seen, nor one whose call it keeps.
// from == to when there is nothing to compact.
func compactionSpan(msgs []model.Message) (from, to int) {
	for from < len(msgs) && msgs[from].Role == model.RoleSystem {
		from++
	}
	if from < len(msgs) && msgs[from].Role == model.RoleUser {
		from++
	}
	to = len(msgs) - 1
	for to >= from && msgs[to].Role != model.RoleAssistant {
		to--
	}
	if to < from {
		return from, from
	}
	return from, to
}

// replaceSpan returns refs with [from, to) replaced by item.
func replaceSpan(refs []string, from, to int, item string) []string {
	out := make([]string, 0, len(refs)-(to-from)+1)
	out = append(out, refs[:from]...)
	out = append(out, item)
	return append(out, refs[to:]...)
}

// summaryRequest is what a summary call sends: the items to summarize,
// rendered as text (tool calls and results out of their protocol pairing),
// each shortened to compactItemLimit characters.
func summaryRequest(items []model.Message) []model.Message {
	var b strings.Builder
	for i, m := range items {
		fmt.Fprintf(&b, "--- item %d: %s", i+1, m.Role)
		if m.ToolCallID != "" {
			fmt.Fprintf(&b, " (result of tool call %s)", m.ToolCallID)
		}
		b.WriteString("\n")
		if m.Content != "" {
			b.WriteString(shorten(m.Content, compactItemLimit))
			b.WriteString("\n")
		}
		for _, c := range m.ToolCalls {
			fmt.Fprintf(&b, "[tool call %s: %s %s]\n", c.ID, c.Name, shorten(string(c.Arguments), compactItemLimit))
		}
	}
	return []model.Message{{Role: model.RoleSystem, Content: summarizerPrompt}, {Role: model.RoleUser, Content: b.String()}}
}

// shorten cuts s to at most n characters, saying how much it left out.
func shorten(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return fmt.Sprintf("%s … [%d more characters left out]", string(r[:n]), len(r)-n)
}

// summaryItem is the transcript item that stands for n summarized items.
func summaryItem(n int, summary string) model.Message {
	return model.Message{Role: model.RoleUser, Content: fmt.Sprintf(
		"[capstan: %d earlier transcript items were replaced by this summary of them, written by the model, because the transcript no longer fit its context]\n\n%s",
		n, summary)}
}

// truncationMarker is the transcript item that stands for n removed items.
func truncationMarker(n int) model.Message {
	return model.Message{Role: model.RoleUser, Content: fmt.Sprintf(
		"[capstan: %d earlier transcript items were removed without a summary, because the transcript no longer fit the model's context and summarizing them failed. "+
			"Their tool results are no longer visible here; read again with a read-only tool what you still need.]", n)}
}

// TruncateTranscript removes the oldest items of a transcript behind a
// visible marker, when the summary call that should have replaced them
// failed. It calls no model; its items are content-addressed, so a retry
// writes the same manifest, which names the whole cut transcript: a fresh
// chain. While the ledger cannot be reached it ends with the BreakerOpen
// error of breaker "ledger", which Temporal retries after the breaker's
// wait, within the activity's attempts.
func (a *Activities) TruncateTranscript(ctx context.Context, in contract.TruncateInput) (contract.TruncateResult, error) {
	ctx = scoped(ctx, in.Scope, in.TaskID)
	res, err := a.truncateTranscript(ctx, in)
	if errors.Is(err, ledger.ErrUnavailable) {
		return res, a.ledgerDown(ctx, err)
	}
	return res, err
}

func (a *Activities) truncateTranscript(ctx context.Context, in contract.TruncateInput) (contract.TruncateResult, error) {
	var pending pendingItems
	tr, msgs, err := a.loadTranscript(ctx, contract.ModelTurnInput{TaskID: in.TaskID, TurnID: in.TurnID, Transcript: in.Transcript, Append: in.Append, Seed: in.Seed}, &pending)
	if err != nil {
		return contract.TruncateResult{}, err
	}
	from, to := compactionSpan(msgs)
	if from == to {
		return contract.TruncateResult{}, nil
	}
	item, err := pending.message(truncationMarker(to - from))
	if err != nil {
		return contract.TruncateResult{}, err
	}
	transcript, err := pending.snapshot(replaceSpan(tr.refs, from, to, item))
	if err != nil {
		return contract.TruncateResult{}, err
	}
	// The seed messages, the marker, then the manifest that refers to
	// them: each item is stored before anything that names it.
	for _, data := range pending.data {
		if _, err := a.Ledger.PutItem(ctx, data); err != nil {
			return contract.TruncateResult{}, fmt.Errorf("store transcript item: %w", err)
		}
	}
	a.Logger.InfoContext(logids.With(ctx, logids.IDs{TaskID: in.TaskID, TurnID: in.TurnID}), "transcript truncated behind a marker", "removed", to-from)
	return contract.TruncateResult{Transcript: transcript, Removed: to - from}, nil
}
