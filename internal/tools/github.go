package tools

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/google/go-github/v62/github"
)

// The built-in GitHub tools. Each one validates its arguments in Identify
// (pure, deterministic, no I/O) and again in Execute, performs at most one
// mutating request per Execute, and names what it changed in
// Result.ExternalID so reconcilers can find it:
//
//	github_get_file             read_only
//	github_list_pull_requests   read_only
//	github_create_branch        conditional  branch:create:<owner>/<repo>:<branch>
//	github_put_file             idempotent   (none; one operation per declared call)
//	github_create_pull_request  conditional  pr:create:<owner>/<repo>:<head>:<base>
//	github_comment              unsafe       (none; reconciled by Marker)
//
// Owner and repository names are case-insensitive on GitHub, so business keys
// and effects use their lower-case form: "Acme/App" and "acme/app" are one
// effect. Branch names and paths are case-sensitive and kept as given.

// NewGitHubClient returns a go-github client for the REST API at baseURL,
// used exactly as given (a trailing slash is added if missing), so the same
// binary talks to api.github.com, a GitHub Enterprise ".../api/v3/", a proxy
// or the sandbox. An empty baseURL means https://api.github.com/. The token,
// when not empty, is sent as a bearer token. hc may be nil.
func NewGitHubClient(baseURL, token string, hc *http.Client) (*github.Client, error) {
	c := github.NewClient(hc)
	if token != "" {
		c = c.WithAuthToken(token)
	}
	if baseURL == "" {
		return c, nil
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("github client: parse base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("github client: base URL %q must be an absolute http(s) URL without query or fragment", baseURL)
	}
	// Set BaseURL directly: WithEnterpriseURLs would append "api/v3/".
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
		if u.RawPath != "" {
			u.RawPath += "/"
		}
	}
	c.BaseURL = u
	return c, nil
}

// GitHubTools returns the six built-in GitHub tools using c. A nil c gives
// tools whose Name, Schema, Class and Identify work (workflow code needs only
// those) and whose Execute fails without sending anything.
func GitHubTools(c *github.Client) []Tool {
	return []Tool{
		getFileTool(c),
		listPullRequestsTool(c),
		createBranchTool(c),
		putFileTool(c),
		createPullRequestTool(c),
		commentTool(c),
	}
}

// Marker is the hidden line embedded in pull request and comment bodies so a
// reconciler can find the effect of operationID: "<!-- capstan-op: <id> -->".
// A ">" in the id is escaped so the id can never close the HTML comment.
func Marker(operationID string) string {
	return "<!-- capstan-op: " + strings.ReplaceAll(operationID, ">", "&gt;") + " -->"
}

// withMarker appends the marker, as its own paragraph, to a body.
func withMarker(body, operationID string) string {
	return body + "\n\n" + Marker(operationID)
}

// ghTool is one GitHub tool; A is its parsed, validated arguments.
type ghTool[A any] struct {
	c                 *github.Client // nil when only Identify and Schema are needed
	name, description string
	class             Class
	schema            func() map[string]any
	parse             func(v *validator, raw json.RawMessage) A // reports problems to v
	identify          func(a A) Identity
	run               func(ctx context.Context, opID string, a A) (Result, error)
}

func (t *ghTool[A]) Name() string           { return t.name }
func (t *ghTool[A]) Description() string    { return t.description }
func (t *ghTool[A]) Class() Class           { return t.class }
func (t *ghTool[A]) Schema() map[string]any { return t.schema() } // a fresh map: callers may not share it

// Identify validates args and names their effect. It does no I/O.
func (t *ghTool[A]) Identify(args json.RawMessage) (Identity, error) {
	a, err := t.args(args)
	if err != nil {
		return Identity{}, err
	}
	return t.identify(a), nil
}

// Execute validates call.Arguments and performs the call once.
func (t *ghTool[A]) Execute(ctx context.Context, call Call) (Result, error) {
	a, err := t.args(call.Arguments)
	if err != nil {
		return Result{}, err
	}
	if t.c == nil {
		return Result{}, fmt.Errorf("%s: %w: no GitHub client configured", t.name, errRefused)
	}
	return t.run(ctx, call.OperationID, a)
}

func (t *ghTool[A]) args(raw json.RawMessage) (A, error) {
	v := &validator{tool: t.name}
	a := t.parse(v, raw)
	return a, v.err
}

// validator collects the first argument problem as an error wrapping
// ErrInvalidArguments that names the field and says why, in one sentence.
type validator struct {
	tool string
	err  error
}

func (v *validator) fail(format string, args ...any) {
	if v.err == nil {
		v.err = fmt.Errorf("%s: %w: %s", v.tool, ErrInvalidArguments, fmt.Sprintf(format, args...))
	}
}

// decode unmarshals the arguments object into dst; unknown fields are ignored.
func (v *validator) decode(raw json.RawMessage, dst any) {
	if trimmed := bytes.TrimSpace(raw); len(trimmed) == 0 || trimmed[0] != '{' {
		v.fail("the arguments must be a JSON object")
		return
	}
	if err := json.Unmarshal(raw, dst); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			v.fail("field %q must not be a JSON %s", typeErr.Field, typeErr.Value)
			return
		}
		v.fail("the arguments are not valid JSON (%v)", err)
	}
}

var (
	ownerRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9-]{0,38}$`)
	nameRE  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`)
	shaRE   = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// repoName is a validated "owner/name".
type repoName struct{ owner, name string }

// key is the case-folded form used in business keys and effects.
func (r repoName) key() string    { return strings.ToLower(r.owner + "/" + r.name) }
func (r repoName) String() string { return r.owner + "/" + r.name }

func (v *validator) repo(s string) repoName {
	const field = "repo"
	owner, name, _ := strings.Cut(s, "/")
	switch {
	case s == "":
		v.fail("field %q is required and must be \"owner/name\"", field)
	case !strings.Contains(s, "/"):
		v.fail("field %q must be \"owner/name\", but %q has no slash", field, s)
	case strings.Count(s, "/") > 1:
		v.fail("field %q must be \"owner/name\", but %q has more than one slash", field, s)
	case owner == "" || name == "":
		v.fail("field %q must be \"owner/name\", but %q has an empty part", field, s)
	case !ownerRE.MatchString(owner) || !nameRE.MatchString(name) || name == "." || name == "..":
		v.fail("field %q must be \"owner/name\" in characters GitHub allows, but %q has others", field, s)
	}
	return repoName{owner: owner, name: name}
}

// ValidRepo reports whether s is a repository "owner/name" the tools accept,
// so the starter can refuse one before a task starts and spends turns on it.
func ValidRepo(s string) bool {
	v := validator{tool: "repo"}
	v.repo(s)
	return v.err == nil
}

// ValidBranchName reports whether s is a branch name the tools accept.
func ValidBranchName(s string) bool { return s != "" && validRefName(s) }

// branch checks a branch name against the rules of git check-ref-format that
// a model is likely to break.
func (v *validator) branch(field, s string) string {
	switch {
	case s == "":
		v.fail("field %q is required", field)
	case !validRefName(s):
		v.fail("field %q must be a valid git branch name, but %q is not", field, s)
	}
	return s
}

func validRefName(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f || strings.ContainsRune(" ~^:?*[\\", r) {
			return false
		}
	}
	return !strings.Contains(s, "..") && !strings.Contains(s, "//") && !strings.Contains(s, "@{") &&
		!strings.HasPrefix(s, "/") && !strings.HasPrefix(s, "-") && !strings.HasSuffix(s, "/") &&
		!strings.HasSuffix(s, ".") && !strings.HasSuffix(s, ".lock") && s != "@"
}

// path checks a repository-relative file path.
func (v *validator) path(s string) string {
	if s == "" {
		v.fail("field %q is required", "path")
		return s
	}
	for _, seg := range strings.Split(s, "/") {
		if seg == "" || seg == "." || seg == ".." || strings.ContainsFunc(seg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			v.fail("field %q must be a relative file path like \"docs/README.md\", but %q is not", "path", s)
			break
		}
	}
	return s
}

func (v *validator) text(field string, s *string, allowEmpty bool) string {
	switch {
	case s == nil:
		v.fail("field %q is required", field)
	case !allowEmpty && strings.TrimSpace(*s) == "":
		v.fail("field %q must not be empty", field)
	default:
		return *s
	}
	return ""
}

// canonical encodes an effect: v is a struct, so fields come out in a fixed
// order, and encoding/json output is deterministic for it.
func canonical(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("tools: encode effect: %v", err)) // plain structs of strings and ints cannot fail
	}
	return b
}

// output encodes a tool's answer to the model.
func output(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("tools: encode output: %v", err)) // plain structs cannot fail
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

// Schema helpers.

func objectSchema(required []string, props map[string]any) map[string]any {
	return map[string]any{"type": "object", "properties": props, "required": required, "additionalProperties": false}
}

func stringProp(description string) map[string]any {
	return map[string]any{"type": "string", "description": description}
}

func repoProp() map[string]any {
	return map[string]any{"type": "string", "pattern": `^[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+$`,
		"description": `Repository as "owner/name", e.g. "acme/payments".`}
}
