package main

import (
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/workflows"
)

// Columns is the width of every human-readable output of starter: it fits a
// 100-column terminal (docs/design.md §9.3). Full ids are in --json.
const Columns = 100

// shortAttempt is an attempt id without its task id: "t1/a2".
func shortAttempt(taskID, attemptID string) string {
	return workflows.WithoutScope(strings.TrimPrefix(attemptID, taskID+"/"))
}

// opLabel names an operation in a few words: its tool and business key
// ("create_branch acme/payments agent/fix"), or its tool, turn and place
// in the turn ("get_file (t2 #1)") for a call without a business key.
func opLabel(taskID string, op workflows.OperationRecord) string {
	rest := op.OperationID
	if i := strings.Index(rest, ":"+taskID+":"); i >= 0 {
		rest = rest[i+len(taskID)+2:]
	}
	return idLabel(taskID, workflows.WithoutScope(rest))
}

// idLabel is opLabel of an operation id without its tenant and task:
// "<tool>:<business key>" or "<turn>:<tool>:<n>".
func idLabel(taskID, rest string) string {
	if m := turnCall.FindStringSubmatch(strings.TrimPrefix(rest, taskID+"/")); m != nil {
		return fmt.Sprintf("%s (%s #%s)", m[2], m[1], m[3])
	}
	tool, key, ok := strings.Cut(rest, ":")
	if !ok {
		return rest
	}
	return tool + " " + keyLabel(key)
}

// keyLabel drops the leading words of a business key that only restate the
// tool ("branch:create:") and joins the rest with spaces.
func keyLabel(key string) string {
	parts := strings.Split(key, ":")
	i := 0
	for i < len(parts)-1 && lowerWord.MatchString(parts[i]) {
		i++
	}
	return strings.Join(parts[i:], " ")
}

var (
	lowerWord = regexp.MustCompile(`^[a-z]+$`)
	// chainIDs is a chain scope (workflows.ChainScope) opening a turn or
	// attempt id whose task id shortLine dropped: "~3fa9c0d1e2b4/t1/a2".
	chainIDs = regexp.MustCompile(`(^|[\s(\[])~[0-9a-f]{12}/`)
	// turnCall is the id of a call without a business key: its turn
	// ("t2"), its tool and its place in the turn (or a uuid).
	turnCall = regexp.MustCompile(`^(t[0-9]+):([^:]+):([^:]+)$`)
)

// journalTime is the RFC 3339 time that opens every journal line.
var journalTime = regexp.MustCompile(`^\d{4}-\d\d-\d\dT(\d\d:\d\d:\d\d)Z `)

// shortLine makes a journal line fit a narrow terminal: the time of day
// only, attempt ids without the task id, operation ids as their labels in
// brackets. The full ids stay in --json and in the workflow's journal.
func shortLine(taskID, line string) string {
	line = journalTime.ReplaceAllString(line, "$1 ")
	if taskID == "" {
		return line
	}
	q := regexp.QuoteMeta(taskID)
	ops := regexp.MustCompile(`[A-Za-z0-9._-]+:` + q + `:([^\s,;]+)`)
	line = ops.ReplaceAllStringFunc(line, func(id string) string {
		rest := id[strings.Index(id, ":"+taskID+":")+len(taskID)+2:]
		return "[" + idLabel(taskID, workflows.WithoutScope(rest)) + "]"
	})
	return chainIDs.ReplaceAllString(strings.ReplaceAll(line, taskID+"/", ""), "$1")
}

// width of s in terminal columns, counting a rune as one column.
func width(s string) int { return utf8.RuneCountInString(s) }

// cut shortens s to w columns, ending in "…" when it cut.
func cut(s string, w int) string {
	if width(s) <= w {
		return s
	}
	if w <= 1 {
		return string([]rune(s)[:max(w, 0)])
	}
	return string([]rune(s)[:w-1]) + "…"
}

// wrap breaks text into lines of at most w columns: the first starts with
// first, the others with rest (both counted in w). Lines break at spaces; a
// word longer than a line is broken where the line ends. Newlines in text
// are kept.
func wrap(text string, w int, first, rest string) []string {
	var out []string
	prefix := first
	for _, para := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		line := prefix
		room := w - width(prefix)
		empty := true
		for _, word := range strings.Fields(para) {
			for {
				n := width(word)
				switch {
				case empty && n <= room:
					line, room, empty = line+word, room-n, false
				case !empty && n+1 <= room:
					line, room = line+" "+word, room-n-1
				case empty:
					// A word longer than a whole line: break it.
					r := []rune(word)
					line += string(r[:max(room, 1)])
					word = string(r[max(room, 1):])
					out = append(out, line)
					line, room, prefix = rest, w-width(rest), rest
					continue
				default:
					out = append(out, line)
					line, room, empty, prefix = rest, w-width(rest), true, rest
					continue
				}
				break
			}
		}
		out = append(out, line)
		prefix = rest
	}
	return out
}

// table lays rows out in columns separated by two spaces, in at most w
// columns: when the rows are too wide, the shrinkable columns are cut
// ("…"), the first listed first, down to 12 columns each, until they fit.
// The last column is never padded.
func table(rows [][]string, w int, shrinkable ...int) []string {
	if len(rows) == 0 {
		return nil
	}
	n := len(rows[0])
	widths := make([]int, n)
	for _, r := range rows {
		for i, c := range r {
			widths[i] = max(widths[i], width(c))
		}
	}
	total := 2 * (n - 1)
	for _, x := range widths {
		total += x
	}
	for _, i := range shrinkable {
		if total <= w {
			break
		}
		by := min(total-w, max(widths[i]-12, 0))
		widths[i] -= by
		total -= by
	}
	out := make([]string, 0, len(rows))
	for _, r := range rows {
		var b strings.Builder
		for i, c := range r {
			c = cut(c, widths[i])
			if i == n-1 {
				b.WriteString(c)
				break
			}
			b.WriteString(c + strings.Repeat(" ", widths[i]-width(c)+2))
		}
		out = append(out, strings.TrimRight(b.String(), " "))
	}
	return out
}
