// Package github holds the built-in GitHub tools, the go-github client
// they use, the marker they leave in what they write, and what a GitHub
// answer means for an effect (Classify).
//
// Each tool is one file that parses its arguments, names its effect, runs
// its call and — for a tool whose unknown outcome must be reconciled — says
// how its effect is found again (a tool.Finder): nothing outside the file
// reads its arguments. The arguments are validated in Identify (pure,
// deterministic, no I/O) and again in Execute and Effect — first against
// the very schema the tool advertises, then against the rules of GitHub and
// git a schema cannot state (package ghref). A tool performs at most one
// mutating request per Execute and names what it changed in
// Result.ExternalID, in the form its lookup reports. Two record, before they
// send anything, a commit their lookup goes by (they are tool.Preparers):
// github_create_pull_request the commit its head branch is at
// (PullRequestFacts), github_create_branch the commit its "from" branch is
// at, which it then creates the branch at (BranchFacts):
//
//	tool                        class        business key                            found again by
//	github_get_file             read_only    —                                       —
//	github_list_pull_requests   read_only    —                                       —
//	github_create_branch        conditional  branch:create:<owner>/<repo>:<branch>   the branch's ref, at the commit "from" was at when sent
//	github_put_file             idempotent   — (one operation per declared call)     the file's blob SHA (also its Verify)
//	github_create_pull_request  conditional  pr:create:<owner>/<repo>:<head>:<base>  the Marker in a body, else the head commit recorded
//	github_comment              unsafe       —                                       the Marker in a comment since the claim
//
// A marker counts only in a pull request or comment written by capstan's own
// account (Self: the token's user, asked once; an App's bot login later):
// anyone can copy a marker into their own text.
//
// Owner and repository names are case-insensitive on GitHub, so business keys
// and effects use their lower-case form: "Acme/App" and "acme/app" are one
// effect. Branch names and paths are case-sensitive and kept as given.
package github

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/tool"
)

// The names the tools are registered under, which the ledger records as
// the kind of their operations.
const (
	NameGetFile           = "github_get_file"
	NameListPullRequests  = "github_list_pull_requests"
	NameCreateBranch      = "github_create_branch"
	NamePutFile           = "github_put_file"
	NameCreatePullRequest = "github_create_pull_request"
	NameComment           = "github_comment"
)

// Tools returns the six built-in GitHub tools using c, writing as the
// user of c's token (AuthenticatedUser, asked once). A nil c gives tools
// whose Name, Schema, Class, Identify and Summary work (workflow code needs
// only those) and whose Execute fails without sending anything.
func Tools(c *gogithub.Client) []tool.Tool {
	return ToolsAs(c, AuthenticatedUser(c))
}

// ToolsAs is Tools with the account capstan writes as given: the lookups
// believe a marker only in a pull request or comment self wrote.
func ToolsAs(c *gogithub.Client, self Self) []tool.Tool {
	return []tool.Tool{
		getFileTool(c),
		listPullRequestsTool(c),
		createBranchTool(c),
		newPutFileTool(c),
		createPullRequestTool(c, self),
		commentTool(c, self),
	}
}

// ghTool is one GitHub tool; A is its parsed, validated arguments.
type ghTool[A any] struct {
	c                 *gogithub.Client // nil when only Identify and Schema are needed
	name, description string
	class             tool.Class
	schema            *tool.Schema
	parse             func(v *validator, raw json.RawMessage) A // reports problems the schema cannot state to v
	identify          func(a A) tool.Identity
	target            func(a A) tool.Target         // what the call acts on, for the task's policy
	summary           func(name string, a A) string // name is the tool's name without "github_"
	run               func(ctx context.Context, opID string, a A) (tool.Result, error)
	// recorded, for a tool that records facts before sending (a
	// tool.Preparer), reads them (tool.Call.Facts, never empty here) into
	// the arguments run acts on. Nil: the tool records none.
	recorded func(a A, facts json.RawMessage) (A, error)
	// find, for a tool whose effect can be found again (findable), names
	// the effect a sent call would leave. It does no I/O.
	find func(a A, s tool.Sent) (tool.Effect, error)
}

func (t *ghTool[A]) Name() string         { return t.name }
func (t *ghTool[A]) Description() string  { return t.description }
func (t *ghTool[A]) Class() tool.Class    { return t.class }
func (t *ghTool[A]) Schema() *tool.Schema { return t.schema }

// Identify validates args and names their effect. It does no I/O.
func (t *ghTool[A]) Identify(args json.RawMessage) (tool.Identity, error) {
	a, err := t.args(args)
	if err != nil {
		return tool.Identity{}, err
	}
	return t.identify(a), nil
}

// Target names what a call acts on (tool.Targeted), for the task's
// policy. It does no I/O.
func (t *ghTool[A]) Target(args json.RawMessage) (tool.Target, error) {
	a, err := t.args(args)
	if err != nil {
		return tool.Target{}, err
	}
	return t.target(a), nil
}

// Summary describes a call, e.g. "create_pull_request acme/payments
// agent/fix → main"; for arguments Identify rejects, just the tool's name.
func (t *ghTool[A]) Summary(args json.RawMessage) string {
	name := strings.TrimPrefix(t.name, "github_")
	a, err := t.args(args)
	if err != nil {
		return name
	}
	return t.summary(name, a)
}

// Execute validates call.Arguments and performs the call once. Its errors
// carry their verdict (Classify), so tool.Classify knows what GitHub's
// answer meant, and a rate limit carries the wait GitHub asked for as a
// *tool.RetryAfterError.
func (t *ghTool[A]) Execute(ctx context.Context, call tool.Call) (tool.Result, error) {
	a, err := t.args(call.Arguments)
	if err != nil {
		return tool.Result{}, err
	}
	if t.c == nil {
		return tool.Result{}, fmt.Errorf("%s: %w: no GitHub client configured", t.name, tool.ErrRefused)
	}
	if t.recorded != nil && len(call.Facts) > 0 {
		if a, err = t.recorded(a, call.Facts); err != nil {
			return tool.Result{}, fmt.Errorf("%s: %w: %w", t.name, tool.ErrRefused, err)
		}
	}
	res, err := t.run(ctx, call.OperationID, a)
	if err != nil {
		return tool.Result{}, marked(err)
	}
	return res, nil
}

// marked gives err its verdict and, for a rate limit, the wait.
func marked(err error) error {
	v := Classify(err)
	err = tool.WithVerdict(err, v)
	if wait, limited := RateLimitWait(err); limited && v == tool.VerdictNotSent {
		err = &tool.RetryAfterError{Wait: wait, Err: err}
	}
	return err
}

// findable is a GitHub tool whose effect can be found again after the
// answer to its call was lost: a tool.Finder. Its lookup is the tool's
// find, over the arguments its own parser reads.
type findable[A any] struct{ *ghTool[A] }

// Effect parses s.Arguments as Execute does and returns the effect the call
// would leave. It does no I/O.
func (t findable[A]) Effect(s tool.Sent) (tool.Effect, error) {
	if t.c == nil {
		return nil, fmt.Errorf("%s: %w: no GitHub client", t.name, tool.ErrNotConfigured)
	}
	a, err := t.args(s.Arguments)
	if err != nil {
		return nil, err
	}
	return t.find(a, s)
}

// requireOperationID refuses a conditional or unsafe call without an
// operation id: its marker could never be reconciled.
func requireOperationID(impl, opID string) error {
	if opID == "" {
		return fmt.Errorf("%s: %w: no operation id, so the effect could not be reconciled", impl, tool.ErrRefused)
	}
	return nil
}

// Listings are read in pages of perPage, at most maxPages of them: a list
// longer than that cannot be searched, and the question counts as not asked.
const (
	perPage  = 100
	maxPages = 50
)

// notFound reports GitHub's own 404. Anything else without an answer — a
// rate limit, a 5xx, a dropped connection, go-github refusing to send while
// a rate limit lasts — is not a 404.
func notFound(err error) bool { return HTTPStatus(err) == http.StatusNotFound }

// anyMarker starts every operation's marker: a body that holds it, but not
// this operation's marker, is another operation's.
var anyMarker = strings.TrimSuffix(Marker(""), " -->")

// Marker is the hidden line embedded in pull request and comment bodies so
// the tool's lookup can find the effect of operationID:
// "<!-- capstan-op: <id> -->".
// A ">" in the id is escaped so the id can never close the HTML comment.
func Marker(operationID string) string {
	return "<!-- capstan-op: " + strings.ReplaceAll(operationID, ">", "&gt;") + " -->"
}

// withMarker appends the marker, as its own paragraph, to a body.
func withMarker(body, operationID string) string {
	return body + "\n\n" + Marker(operationID)
}

// args checks raw against the tool's schema, then parses it and applies the
// rules the schema cannot state.
func (t *ghTool[A]) args(raw json.RawMessage) (A, error) {
	if err := t.schema.Validate(raw); err != nil {
		var zero A
		return zero, fmt.Errorf("%s: %w", t.name, err)
	}
	v := &validator{impl: t.name}
	a := t.parse(v, raw)
	return a, v.err
}

// canonical encodes an effect: v is a struct, so fields come out in a fixed
// order, and encoding/json output is deterministic for it.
func canonical(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("github tools: encode effect: %v", err)) // plain structs of strings and ints cannot fail
	}
	return b
}

// output encodes a tool's answer to the model.
func output(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("github tools: encode output: %v", err)) // plain structs cannot fail
	}
	return b
}

// blobSHA is git's blob id for content, the sha GitHub reports for a file.
func blobSHA(content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}

// Schema helpers. Every tool's schema is a package variable, compiled once
// when the program starts (a schema that does not compile stops it there),
// and a strict object: a field the schema does not name is refused, not
// ignored, so a misspelt optional field cannot silently fall back to its
// default.

func objectSchema(required []string, props map[string]any) *tool.Schema {
	return tool.MustSchema(map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false})
}

func stringProp(description string) map[string]any {
	return map[string]any{"type": "string", "description": description}
}

func repoProp() map[string]any {
	return map[string]any{"type": "string", "pattern": `^[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+$`,
		"description": `Repository as "owner/name", e.g. "acme/payments".`}
}
