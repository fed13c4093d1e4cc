package reconcilers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan"
)

// Outcome is what one question to an external system saw: a verdict of
// capstan's one vocabulary, drawn from one answer.
type Outcome = capstan.Verdict

const (
	// Found: exactly one effect of the operation exists.
	Found = capstan.VerdictFound
	// NotSeen: the system answered and showed no effect of the operation.
	// It may still be catching up; only the caller's consistency window
	// turns this into "absent".
	NotSeen = capstan.VerdictNotYet
	// Ambiguous: the answer cannot be read either way — several effects
	// carry the operation's mark, or something exists that may or may not
	// be the operation's. A person must decide.
	Ambiguous = capstan.VerdictIndeterminate
)

// Observation is the answer to one question.
type Observation struct {
	Outcome Outcome
	// ExternalID names the effect when Found, in the form the tool records
	// on success: a pull request or comment URL, "refs/heads/<b>@<sha>",
	// a blob SHA, "<channel>/<ts>".
	ExternalID string
	// Detail says in one sentence what was asked and what was seen.
	Detail string
}

// ClockMargin widens "since the claim" in the list questions: the claim time
// comes from the worker's clock, the effect's time from the system's.
const ClockMargin = 2 * time.Minute

// Kinds of operation that Set can ask about, as the ledger records them.
const (
	KindPullRequest = "github_create_pull_request"
	KindBranch      = "github_create_branch"
	KindFile        = "github_put_file"
	KindComment     = "github_comment"
	KindSlackPost   = "slack_post"
)

var (
	// ErrNoReconciler: nothing knows how to look for this kind of
	// operation; only a person can tell.
	ErrNoReconciler = errors.New("no reconciler for this kind of operation")
	// ErrNotConfigured: the reconciler needs a client this worker does not
	// have.
	ErrNotConfigured = errors.New("the reconciler's client is not configured on this worker")
	// ErrBadTarget: the question cannot be formed from what was given
	// (arguments missing or malformed); asking again cannot help.
	ErrBadTarget = errors.New("cannot form the reconciler's question")
)

// Target names the operation to look for.
type Target struct {
	Kind        string // the ledger's Operation.Kind: a tool name or "slack_post"
	OperationID string
	// Arguments are the tool's arguments (tool operations).
	Arguments json.RawMessage
	// Channel is where a Slack delivery was posted (slack_post).
	Channel string
	// EventType is the metadata event type of capstan's Slack messages
	// (slack_post).
	EventType string
	// Since is when the operation was first claimed: its effect cannot be
	// older.
	Since time.Time
	// Facts are what the attempt that sent the request recorded just before
	// sending it (the ledger's Operation.Facts): for a pull request, the
	// commit its head branch was at (githubtools.PullRequestFacts). Nil
	// when none were recorded.
	Facts json.RawMessage
}

// Set holds one reconciler per system. Build it with NewSet.
type Set struct {
	github *GitHub
	slack  *Slack // nil when the worker has no Slack client
}

// NewSet returns the reconcilers over gh and sl. sl may be nil: Slack
// deliveries then cannot be reconciled on this worker (ErrNotConfigured).
func NewSet(gh *github.Client, sl SlackHistory) *Set {
	s := &Set{}
	if gh != nil {
		s.github = &GitHub{c: gh}
	}
	if sl != nil {
		s.slack = &Slack{c: sl}
	}
	return s
}

// Check reports whether Ask can ask about kind on this worker: nil,
// ErrNoReconciler or ErrNotConfigured.
func (s *Set) Check(kind string) error {
	switch kind {
	case KindPullRequest, KindBranch, KindFile, KindComment:
		if s.github == nil {
			return fmt.Errorf("%s: GitHub: %w", kind, ErrNotConfigured)
		}
		return nil
	case KindSlackPost:
		if s.slack == nil {
			return fmt.Errorf("%s: Slack: %w", kind, ErrNotConfigured)
		}
		return nil
	default:
		return fmt.Errorf("%q: %w", kind, ErrNoReconciler)
	}
}

// Ask asks the system behind t.Kind once. Errors wrapping ErrNoReconciler,
// ErrNotConfigured or ErrBadTarget are permanent; any other error means the
// question could not be asked this time.
func (s *Set) Ask(ctx context.Context, t Target) (Observation, error) {
	if err := s.Check(t.Kind); err != nil {
		return Observation{}, err
	}
	if t.OperationID == "" {
		return Observation{}, fmt.Errorf("%s: %w: no operation id", t.Kind, ErrBadTarget)
	}
	switch t.Kind {
	case KindPullRequest:
		q, err := pullRequestQuery(t)
		if err != nil {
			return Observation{}, err
		}
		return s.github.PullRequest(ctx, q)
	case KindBranch:
		q, err := branchQuery(t)
		if err != nil {
			return Observation{}, err
		}
		return s.github.Branch(ctx, q)
	case KindFile:
		q, err := fileQuery(t)
		if err != nil {
			return Observation{}, err
		}
		return s.github.File(ctx, q)
	case KindComment:
		q, err := commentQuery(t)
		if err != nil {
			return Observation{}, err
		}
		return s.github.Comment(ctx, q)
	default: // KindSlackPost; Check refused the rest
		q, err := messageQuery(t)
		if err != nil {
			return Observation{}, err
		}
		return s.slack.Message(ctx, q)
	}
}

// decodeArgs decodes a tool's arguments into dst, refusing what cannot form
// a question.
func decodeArgs(t Target, dst any) error {
	if len(t.Arguments) == 0 {
		return fmt.Errorf("%s: %w: the tool's arguments were not given", t.Kind, ErrBadTarget)
	}
	if err := json.Unmarshal(t.Arguments, dst); err != nil {
		return fmt.Errorf("%s: %w: the tool's arguments do not decode: %v", t.Kind, ErrBadTarget, err)
	}
	return nil
}

// Repo is a GitHub repository.
type Repo struct{ Owner, Name string }

func (r Repo) String() string { return r.Owner + "/" + r.Name }

// parseRepo reads "owner/name" from a tool's arguments.
func parseRepo(kind, s string) (Repo, error) {
	owner, name, ok := strings.Cut(s, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return Repo{}, fmt.Errorf("%s: %w: repository %q is not \"owner/name\"", kind, ErrBadTarget, s)
	}
	return Repo{Owner: owner, Name: name}, nil
}

// required refuses an empty argument.
func required(kind string, fields ...[2]string) error {
	for _, f := range fields {
		if f[1] == "" {
			return fmt.Errorf("%s: %w: argument %q is empty", kind, ErrBadTarget, f[0])
		}
	}
	return nil
}
