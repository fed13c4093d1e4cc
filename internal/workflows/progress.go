package workflows

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/capstanhq/capstan/internal/model"
)

// QueryProgress names the query `starter follow` polls: what the task is
// doing now, in one round trip. It takes the number of journal lines the
// caller has already read and returns only the lines after them. A query
// adds no command to the history, so it needs no workflow.GetVersion.
const QueryProgress = "progress"

// Progress is a running task's state as a follower needs it. The text of
// attempts is not here: it streams from the worker (AttemptReport.StreamURL).
type Progress struct {
	Status Status `json:"status"`
	// Attempts are every settled model attempt of the task, oldest first:
	// a follower strikes the text of those that did not complete.
	Attempts   []AttemptRecord   `json:"attempts"`
	Retry      *RetryWait        `json:"retry,omitempty"`
	Operations []OperationRecord `json:"operations"`
	Deliveries []DeliveryRecord  `json:"deliveries"`
	// Waiting is what the task waits for when it waits for a breaker.
	Waiting string `json:"waiting,omitempty"`
	// NeedsHuman lists the operations that wait for a person.
	NeedsHuman []string `json:"needs_human,omitempty"`
	// Journal holds the lines after the first `from`; JournalNext is the
	// `from` of the next call.
	Journal     []string `json:"journal"`
	JournalNext int      `json:"journal_next"`
}

// RetryWait is the turn guard's latest decision to try a turn again.
type RetryWait struct {
	// AttemptID is the abandoned attempt; the retry is the next attempt of
	// its turn.
	AttemptID string        `json:"attempt_id"`
	Outcome   model.Outcome `json:"outcome"`
	// Reason is the guard's reason, without its budget.
	Reason string `json:"reason"`
	// Budget, Spent: the retry budget the guard charged ("idle") and how
	// much of it this retry spent ("idle 1/1"); empty when none was.
	Budget string        `json:"budget,omitempty"`
	Spent  int           `json:"spent,omitempty"`
	Of     int           `json:"of,omitempty"`
	Delay  time.Duration `json:"delay"`
	// Until is when the next attempt starts (to the journal's second).
	Until time.Time `json:"until"`
}

// progress answers QueryProgress.
func (t *task) progress(from int) (Progress, error) {
	p := Progress{
		Status: t.result.Status, Attempts: []AttemptRecord{}, Operations: t.result.Operations,
		Deliveries: t.result.Deliveries, Waiting: t.result.Waiting, Journal: []string{}, JournalNext: len(t.journal),
	}
	for _, turn := range t.result.Turns {
		p.Attempts = append(p.Attempts, turn.Attempts...)
	}
	for id, waiting := range t.waiting {
		if waiting {
			p.NeedsHuman = append(p.NeedsHuman, id)
		}
	}
	slices.Sort(p.NeedsHuman)
	if from >= 0 && from < len(t.journal) {
		p.Journal = t.journal[from:]
	}
	if n := len(p.Attempts); n > 0 && p.Attempts[n-1].Outcome != model.OutcomeCompleted {
		p.Retry = retryWaitOf(t.journal, p.Attempts[n-1].AttemptID)
	}
	return p, nil
}

// retryLine is the journal line of runTurn's retry decision:
// "<time> <attempt> abandoned (<outcome>); retrying in <delay>: <reason>".
var (
	retryLine   = regexp.MustCompile(`^(\S+) (\S+) abandoned \(([a-z_]+)\); retrying in (\S+): (.*)$`)
	budgetSpent = regexp.MustCompile(`^(.*) \(([a-z]+) (\d+)/(\d+)\)$`)
)

// retryWaitOf reads the retry decision on attempt from the journal; nil
// when the guard gave up or waited for a breaker instead.
func retryWaitOf(journal []string, attempt string) *RetryWait {
	for i := len(journal) - 1; i >= 0; i-- {
		m := retryLine.FindStringSubmatch(journal[i])
		if m == nil || m[2] != attempt {
			if strings.Contains(journal[i], attempt+" ") {
				return nil // a later line about the attempt: no retry wait
			}
			continue
		}
		at, err1 := time.Parse(time.RFC3339, m[1])
		d, err2 := time.ParseDuration(m[4])
		if err1 != nil || err2 != nil {
			return nil
		}
		w := &RetryWait{AttemptID: attempt, Outcome: model.Outcome(m[3]), Reason: m[5], Delay: d, Until: at.Add(d)}
		if b := budgetSpent.FindStringSubmatch(m[5]); b != nil {
			w.Reason, w.Budget = b[1], b[2]
			w.Spent, _ = strconv.Atoi(b[3])
			w.Of, _ = strconv.Atoi(b[4])
		}
		return w
	}
	return nil
}
