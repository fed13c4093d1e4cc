// Package taskstart starts an AgentTask and reads its result the one way
// `starter run`, `starter status` and package capstantest do: the start's
// workflow options (id, id policies, summary, memo, fairness, search
// attributes) and the result of a task that ended, whether it completed,
// failed or was cancelled.
package taskstart

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/capstanhq/capstan/internal/codec"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/tools/ghref"
	"github.com/capstanhq/capstan/internal/workflows"
)

// Memo fields a task's start sets (docs/design.md §9.2): the hash of its
// start input, against which a later `starter run` with the same --id is
// compared, and a random id of this start, by which the starter tells a
// start it made from a task it found running.
const (
	MemoInputHash = "capstan_input_sha256"
	MemoStartID   = "capstan_start_id"
)

// InputHash is the sha256 of the task's start input in its JSON encoding:
// the same flags and settings give the same hash. The logic stamp is left
// out: it says which code started the task, not what the task is, so a
// newer starter attaches to a task an older one started.
func InputHash(in workflows.AgentTaskInput) string {
	in.Logic = 0
	b, err := json.Marshal(in)
	if err != nil {
		// AgentTaskInput holds only JSON-encodable fields.
		panic(fmt.Sprintf("encode task input: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// NewStartID is a random id of one start (MemoStartID).
func NewStartID() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Options are the workflow options of the start of in on queue, with
// priority (the tenant as its fairness key) and startID (NewStartID). A
// running task with the id is not started again: the start returns it
// (WorkflowIDConflictPolicy USE_EXISTING), and the memo tells whether it
// runs with this input. A task id names its operations in the ledger; a
// second task under the same id would replay the first one's effects, so
// ids are never reused.
func Options(in workflows.AgentTaskInput, queue string, priority temporal.Priority, startID string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                                       workflows.WorkflowID(in.TaskID),
		TaskQueue:                                queue,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		StaticSummary:                            Summary(in),
		Memo:                                     map[string]any{MemoInputHash: InputHash(in), MemoStartID: startID},
		// The task's fairness key, weight and priority; the server gives
		// them to every workflow and activity task of the workflow
		// (an activity that sets no priority of its own inherits it).
		Priority:              priority,
		TypedSearchAttributes: temporal.NewSearchAttributes(append(workflows.StartAttributes(in), workflows.AttrTenant.ValueSet(in.Tenant))...),
	}
}

// Summary is the task's static summary, what the Temporal UI's workflow
// list shows for it: the repository and the first line of the prompt (its
// first non-blank line, cut at SummaryRunes), never text from the lines
// after it.
func Summary(in workflows.AgentTaskInput) string {
	p := firstLine(in.Prompt)
	if r := []rune(p); len(r) > SummaryRunes {
		p = string(r[:SummaryRunes]) + "…"
	}
	switch {
	case in.Repo == "":
		return p
	case p == "":
		return in.Repo
	default:
		return fmt.Sprintf("%s · %s", in.Repo, p)
	}
}

// SummaryRunes bounds the prompt's line in a task's summary.
const SummaryRunes = 80

// firstLine is the first line of s that is not blank, trimmed.
func firstLine(s string) string {
	for line := range strings.Lines(s) {
		if t := strings.TrimSpace(line); t != "" {
			return t
		}
	}
	return ""
}

// AwaitResult waits for the task's workflow to close and returns its
// result, whether it completed, failed or was cancelled: failures and
// cancellations carry the result as error details.
func AwaitResult(ctx context.Context, c client.Client, wid, runID string) (workflows.TaskResult, error) {
	var res workflows.TaskResult
	err := c.GetWorkflow(ctx, wid, runID).Get(ctx, &res)
	if err == nil {
		return res, nil
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("stopped waiting for %s; the task goes on (starter status %s)", wid, workflows.TaskIDOf(wid))
	}
	if errors.Is(err, codec.ErrUnknownKey) || errors.Is(err, codec.ErrCorrupt) {
		return res, err // the keys are wrong, not the task
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.HasDetails() && appErr.Details(&res) == nil {
		return res, nil
	}
	var canErr *temporal.CanceledError
	if errors.As(err, &canErr) && canErr.HasDetails() && canErr.Details(&res) == nil {
		return res, nil
	}
	res = workflows.TaskResult{TaskID: workflows.TaskIDOf(wid), WorkflowID: wid, Status: workflows.StatusFailed, Message: err.Error()}
	var term *temporal.TerminatedError
	var timeout *temporal.TimeoutError
	switch {
	case errors.As(err, &canErr):
		res.Status = workflows.StatusCancelled
	case errors.As(err, &term):
		res.FailureCode = workflows.FailTerminated
	case errors.As(err, &timeout):
		res.FailureCode = workflows.FailWorkflowTimeout
	default:
		res.FailureCode = workflows.FailInternalError
	}
	return res, nil
}

// Repositories are a task's repositories, each once whatever its case, in
// order: the task's own (repo, "" for none), each comment target's, then
// each of extra, which must be OWNER/NAME. A malformed extra is a
// *BadRepositoryError naming it; `starter run` (--allow-repo) and
// capstantest (TaskOptions.Repositories) word it for their callers.
func Repositories(repo string, comments []contract.CommentTarget, extra []string) ([]string, error) {
	var repos []string
	seen := map[string]bool{}
	add := func(r string) {
		if r != "" && !seen[strings.ToLower(r)] {
			seen[strings.ToLower(r)] = true
			repos = append(repos, r)
		}
	}
	add(repo)
	for _, c := range comments {
		add(c.Repo)
	}
	for _, r := range extra {
		parsed, err := ghref.ParseRepo(r)
		if err != nil {
			return nil, &BadRepositoryError{Repo: r}
		}
		add(parsed.String())
	}
	return repos, nil
}

// BadRepositoryError is a repository that is not of the form OWNER/NAME.
type BadRepositoryError struct{ Repo string }

func (e *BadRepositoryError) Error() string {
	return fmt.Sprintf("%q is not of the form OWNER/NAME", e.Repo)
}
