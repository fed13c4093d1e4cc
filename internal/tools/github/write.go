package github

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/tools"
	"github.com/capstanhq/capstan/internal/tools/ghref"
)

// requireOperationID refuses a conditional or unsafe call without an
// operation id: its marker could never be reconciled.
func requireOperationID(tool, opID string) error {
	if opID == "" {
		return fmt.Errorf("%s: %w: no operation id, so the effect could not be reconciled", tool, tools.ErrRefused)
	}
	return nil
}

type createBranchArgs struct {
	repo         ghref.Repo
	branch, from string
}

var createBranchSchema = objectSchema([]string{"repo", "branch", "from"}, map[string]any{
	"repo":   repoProp(),
	"branch": stringProp(`Name of the branch to create, e.g. "agent/fix-typo".`),
	"from":   stringProp(`Existing branch name (e.g. "main") or full 40-character commit SHA to start the branch at.`),
})

func createBranchTool(c *gogithub.Client) tools.Tool {
	return &ghTool[createBranchArgs]{
		c:           c,
		name:        "github_create_branch",
		description: "Create a new branch in a GitHub repository, pointing at the head of another branch or at a commit. Fails if the branch already exists.",
		class:       tools.Conditional,
		schema:      createBranchSchema,
		parse: func(v *validator, raw json.RawMessage) createBranchArgs {
			var in struct {
				Repo   string `json:"repo"`
				Branch string `json:"branch"`
				From   string `json:"from"`
			}
			v.decode(raw, &in)
			a := createBranchArgs{repo: v.repo(in.Repo), branch: v.branch("branch", in.Branch), from: in.From}
			if !shaRE.MatchString(in.From) {
				v.branch("from", in.From)
			}
			return a
		},
		identify: func(a createBranchArgs) tools.Identity {
			return tools.Identity{
				BusinessKey: "branch:create:" + a.repo.Key() + ":" + a.branch,
				Effect: canonical(struct {
					Repo   string `json:"repo"`
					Branch string `json:"branch"`
					From   string `json:"from"`
				}{a.repo.Key(), a.branch, a.from}),
			}
		},
		summary: func(name string, a createBranchArgs) string {
			return fmt.Sprintf("%s %s %s from %s", name, a.repo, a.branch, a.from)
		},
		run: func(ctx context.Context, _ string, a createBranchArgs) (tools.Result, error) {
			sha := a.from
			if !shaRE.MatchString(sha) {
				ref, _, err := c.Git.GetRef(ctx, a.repo.Owner, a.repo.Name, "heads/"+a.from)
				if err != nil {
					return tools.Result{}, fmt.Errorf("github_create_branch: resolve branch %q of %s: %w: %w", a.from, a.repo, errWriteNotSent, err)
				}
				sha = ref.GetObject().GetSHA()
			}
			ref, _, err := c.Git.CreateRef(ctx, a.repo.Owner, a.repo.Name, &gogithub.Reference{
				Ref: gogithub.String("refs/heads/" + a.branch), Object: &gogithub.GitObject{SHA: gogithub.String(sha)}})
			if err != nil {
				return tools.Result{}, fmt.Errorf("github_create_branch: create %s in %s at %s: %w", a.branch, a.repo, sha, err)
			}
			sha = ref.GetObject().GetSHA()
			out := struct {
				Ref  string `json:"ref"`
				SHA  string `json:"sha"`
				From string `json:"from"`
			}{ref.GetRef(), sha, a.from}
			return tools.Result{Output: output(out), ExternalID: ref.GetRef() + "@" + sha}, nil
		},
	}
}

type putFileArgs struct {
	repo                           ghref.Repo
	branch, path, content, message string
}

var putFileSchema = objectSchema([]string{"repo", "branch", "path", "content", "message"}, map[string]any{
	"repo":    repoProp(),
	"branch":  stringProp("Existing branch to commit to. Never the default branch unless asked."),
	"path":    stringProp(`File path relative to the repository root, e.g. "docs/README.md".`),
	"content": stringProp("The complete new content of the file (UTF-8 text)."),
	"message": stringProp("Commit message."),
})

// putFileTool is github_put_file. Its write is idempotent, and it is a
// tools.Verifier: reading the file back tells whether a write whose answer
// was lost landed.
type putFileTool struct {
	*ghTool[putFileArgs]
}

func newPutFileTool(c *gogithub.Client) tools.Tool {
	return putFileTool{&ghTool[putFileArgs]{
		c:           c,
		name:        "github_put_file",
		description: "Create or replace one file on an existing branch of a GitHub repository with the given content, as one commit. Writing content the file already has changes nothing.",
		class:       tools.Idempotent,
		schema:      putFileSchema,
		parse: func(v *validator, raw json.RawMessage) putFileArgs {
			var in struct {
				Repo    string `json:"repo"`
				Branch  string `json:"branch"`
				Path    string `json:"path"`
				Content string `json:"content"`
				Message string `json:"message"`
			}
			v.decode(raw, &in)
			return putFileArgs{repo: v.repo(in.Repo), branch: v.branch("branch", in.Branch), path: v.path(in.Path),
				content: in.Content, message: v.nonBlank("message", in.Message)}
		},
		identify: func(a putFileArgs) tools.Identity {
			// The content defines the effect (by its blob sha, to keep the
			// effect small); the commit message does not. There is no
			// business key: a write is safe to repeat (it reads first and
			// writes with the expected blob sha), so every declared call is
			// its own operation. A key would make a later write of the same
			// content (a revert, say) replay an old success and send nothing.
			sha := blobSHA([]byte(a.content))
			return tools.Identity{
				Effect: canonical(struct {
					Repo    string `json:"repo"`
					Branch  string `json:"branch"`
					Path    string `json:"path"`
					BlobSHA string `json:"blob_sha"`
				}{a.repo.Key(), a.branch, a.path, sha}),
			}
		},
		summary: func(name string, a putFileArgs) string {
			return fmt.Sprintf("%s %s %s:%s", name, a.repo, a.branch, a.path)
		},
		run: func(ctx context.Context, opID string, a putFileArgs) (tools.Result, error) {
			return putFile(ctx, c, opID, a)
		},
	}}
}

// putFileOutput is github_put_file's answer to the model.
type putFileOutput struct {
	Path      string `json:"path"`
	Branch    string `json:"branch"`
	BlobSHA   string `json:"blob_sha"`
	CommitSHA string `json:"commit_sha,omitempty"`
	Changed   bool   `json:"changed"`
}

// Verify reads the file on the branch and compares its blob sha with the sha
// of the content the call writes: equal means the write is in place (landed,
// with the result a write would have given, less the commit sha, which a read
// of the file does not tell); a missing file, or another content, means it
// is not; a failed read cannot tell.
func (t putFileTool) Verify(ctx context.Context, call tools.Call) (tools.Result, bool, error) {
	a, err := t.args(call.Arguments)
	if err != nil {
		return tools.Result{}, false, err
	}
	if t.c == nil {
		return tools.Result{}, false, fmt.Errorf("%s: %w: no GitHub client configured", t.name, tools.ErrRefused)
	}
	want := blobSHA([]byte(a.content))
	file, dir, _, err := t.c.Repositories.GetContents(ctx, a.repo.Owner, a.repo.Name, a.path,
		&gogithub.RepositoryContentGetOptions{Ref: a.branch})
	switch {
	case HTTPStatus(err) == http.StatusNotFound:
		return tools.Result{}, false, nil // no such file (or branch): the write is not in place
	case err != nil:
		return tools.Result{}, false, fmt.Errorf("github_put_file: read back %s on %s of %s: %w", a.path, a.branch, a.repo, err)
	case dir != nil || file.GetType() != "file" || file.GetSHA() != want:
		return tools.Result{}, false, nil
	}
	return tools.Result{Output: output(putFileOutput{a.path, a.branch, want, "", true}), ExternalID: want}, true, nil
}

// putFile makes the file hold a.content with a compare-and-set on the blob
// sha read first: identical content is a no-op (so a repeat after an unknown
// outcome writes nothing), and a concurrent change in between makes GitHub
// refuse the write (409) instead of silently overwriting it.
func putFile(ctx context.Context, c *gogithub.Client, opID string, a putFileArgs) (tools.Result, error) {
	content := []byte(a.content)
	want := blobSHA(content)
	current := ""
	file, dir, _, err := c.Repositories.GetContents(ctx, a.repo.Owner, a.repo.Name, a.path,
		&gogithub.RepositoryContentGetOptions{Ref: a.branch})
	switch {
	case HTTPStatus(err) == http.StatusNotFound:
		// Absent; if the branch is what is missing, the write says so.
	case err != nil:
		return tools.Result{}, fmt.Errorf("github_put_file: read %s on %s of %s: %w: %w", a.path, a.branch, a.repo, errWriteNotSent, err)
	case dir != nil || file.GetType() != "file":
		return tools.Result{}, fmt.Errorf("github_put_file: %w: %s on %s of %s is not a regular file", tools.ErrRefused, a.path, a.branch, a.repo)
	default:
		current = file.GetSHA()
	}
	if current == want {
		return tools.Result{Output: output(putFileOutput{a.path, a.branch, want, "", false}), ExternalID: want}, nil
	}
	msg := a.message
	if opID != "" {
		msg += "\n\nCapstan-Operation: " + opID // a git trailer, for audits
	}
	opts := &gogithub.RepositoryContentFileOptions{Message: &msg, Content: content, Branch: &a.branch}
	if content == nil {
		opts.Content = []byte{} // "" creates an empty file; null would be refused
	}
	put := c.Repositories.CreateFile
	if current != "" {
		opts.SHA, put = &current, c.Repositories.UpdateFile
	}
	// Unlike GetContents, go-github does not escape the path of a write.
	segments := strings.Split(a.path, "/")
	for i, seg := range segments {
		segments[i] = url.PathEscape(seg)
	}
	resp, _, err := put(ctx, a.repo.Owner, a.repo.Name, strings.Join(segments, "/"), opts)
	if changedSinceRead(err) {
		return tools.Result{}, fmt.Errorf("github_put_file: write %s on %s of %s (expected blob %q): %w: %w", a.path, a.branch, a.repo, current, tools.ErrChangedSinceRead, err)
	}
	if err != nil {
		return tools.Result{}, fmt.Errorf("github_put_file: write %s on %s of %s (expected blob %q): %w", a.path, a.branch, a.repo, current, err)
	}
	sha := resp.GetContent().GetSHA()
	return tools.Result{Output: output(putFileOutput{a.path, a.branch, sha, resp.Commit.GetSHA(), true}), ExternalID: sha}, nil
}

// changedSinceRead reports GitHub refusing a contents write because the file
// is not what the read before it showed: a 409 for a stale expected blob
// sha, or a 422 asking for a sha because a file now exists where the read
// found none.
func changedSinceRead(err error) bool {
	var answer *gogithub.ErrorResponse
	if !errors.As(err, &answer) || answer.Response == nil {
		return false
	}
	switch answer.Response.StatusCode {
	case http.StatusConflict:
		return true
	case http.StatusUnprocessableEntity:
		return strings.Contains(answer.Message, `"sha"`)
	}
	return false
}

type createPullArgs struct {
	repo                    ghref.Repo
	head, base, title, body string
}

var createPullRequestSchema = objectSchema([]string{"repo", "head", "base", "title", "body"}, map[string]any{
	"repo":  repoProp(),
	"head":  stringProp(`Branch of the same repository with the changes, e.g. "agent/fix-typo".`),
	"base":  stringProp(`Branch to merge into, e.g. "main".`),
	"title": stringProp("Pull request title."),
	"body":  stringProp("Pull request description (Markdown)."),
})

// pullRequestTool is github_create_pull_request. It is a tools.Preparer:
// before the pull request is opened it records the commit the head branch
// is at (PullRequestFacts), which the pull request reconciler matches.
type pullRequestTool struct {
	*ghTool[createPullArgs]
}

// PullRequestFacts are what github_create_pull_request records before it
// sends its request.
type PullRequestFacts struct {
	// HeadSHA is the commit the head branch pointed at just before the
	// request was sent: the head a pull request it opened started from.
	HeadSHA string `json:"head_sha"`
}

// Prepare reads the head branch's ref and returns PullRequestFacts. A head
// branch GitHub does not show (404: it does not exist, or a replica has not
// seen it yet) gives no facts and no error: the request itself then decides
// (GitHub refuses a head it does not have), and a reconciler goes by the
// marker alone. Any other failure to read is an error carrying its verdict,
// and the wait a rate limit asked for.
func (t pullRequestTool) Prepare(ctx context.Context, call tools.Call) (json.RawMessage, error) {
	a, err := t.args(call.Arguments)
	if err != nil {
		return nil, err
	}
	if t.c == nil {
		return nil, nil // Execute refuses the call, sending nothing
	}
	ref, _, err := t.c.Git.GetRef(ctx, a.repo.Owner, a.repo.Name, "heads/"+a.head)
	switch {
	case HTTPStatus(err) == http.StatusNotFound:
		return nil, nil
	case err != nil:
		return nil, marked(fmt.Errorf("github_create_pull_request: read head branch %s of %s: %w", a.head, a.repo, err))
	}
	return output(PullRequestFacts{HeadSHA: ref.GetObject().GetSHA()}), nil
}

func createPullRequestTool(c *gogithub.Client) tools.Tool {
	return pullRequestTool{&ghTool[createPullArgs]{
		c:           c,
		name:        "github_create_pull_request",
		description: "Open a pull request in a GitHub repository from a head branch into a base branch. At most one open pull request can exist per head and base.",
		class:       tools.Conditional,
		schema:      createPullRequestSchema,
		parse: func(v *validator, raw json.RawMessage) createPullArgs {
			var in struct {
				Repo  string `json:"repo"`
				Head  string `json:"head"`
				Base  string `json:"base"`
				Title string `json:"title"`
				Body  string `json:"body"`
			}
			v.decode(raw, &in)
			a := createPullArgs{repo: v.repo(in.Repo), head: v.branch("head", in.Head), base: v.branch("base", in.Base),
				title: v.nonBlank("title", in.Title), body: in.Body}
			if a.head == a.base && a.head != "" {
				v.fail("fields \"head\" and \"base\" must differ, but both are %q", a.head)
			}
			return a
		},
		identify: func(a createPullArgs) tools.Identity {
			// Title and body do not define the effect: a retry that rewords
			// them is still the same pull request.
			return tools.Identity{
				BusinessKey: "pr:create:" + a.repo.Key() + ":" + a.head + ":" + a.base,
				Effect: canonical(struct {
					Repo string `json:"repo"`
					Head string `json:"head"`
					Base string `json:"base"`
				}{a.repo.Key(), a.head, a.base}),
			}
		},
		summary: func(name string, a createPullArgs) string {
			return fmt.Sprintf("%s %s %s → %s", name, a.repo, a.head, a.base)
		},
		run: func(ctx context.Context, opID string, a createPullArgs) (tools.Result, error) {
			if err := requireOperationID("github_create_pull_request", opID); err != nil {
				return tools.Result{}, err
			}
			pr, _, err := c.PullRequests.Create(ctx, a.repo.Owner, a.repo.Name, &gogithub.NewPullRequest{
				Title: &a.title, Head: &a.head, Base: &a.base, Body: gogithub.String(withMarker(a.body, opID))})
			if err != nil {
				return tools.Result{}, fmt.Errorf("github_create_pull_request: open %s → %s in %s: %w", a.head, a.base, a.repo, err)
			}
			out := struct {
				Number  int    `json:"number"`
				HTMLURL string `json:"html_url"`
				Head    string `json:"head"`
				Base    string `json:"base"`
				HeadSHA string `json:"head_sha"`
				State   string `json:"state"`
			}{pr.GetNumber(), pr.GetHTMLURL(), pr.GetHead().GetRef(), pr.GetBase().GetRef(), pr.GetHead().GetSHA(), pr.GetState()}
			return tools.Result{Output: output(out), ExternalID: pr.GetHTMLURL()}, nil
		},
	}}
}

type commentArgs struct {
	repo   ghref.Repo
	number int
	body   string
}

var commentSchema = objectSchema([]string{"repo", "number", "body"}, map[string]any{
	"repo":   repoProp(),
	"number": map[string]any{"type": "integer", "minimum": 1, "description": "Issue or pull request number."},
	"body":   stringProp("Comment text (Markdown)."),
})

func commentTool(c *gogithub.Client) tools.Tool {
	return &ghTool[commentArgs]{
		c:           c,
		name:        "github_comment",
		description: "Post a comment on an issue or pull request of a GitHub repository. Each call posts a new comment.",
		class:       tools.Unsafe,
		schema:      commentSchema,
		parse: func(v *validator, raw json.RawMessage) commentArgs {
			var in struct {
				Repo   string      `json:"repo"`
				Number json.Number `json:"number"`
				Body   string      `json:"body"`
			}
			v.decode(raw, &in)
			a := commentArgs{repo: v.repo(in.Repo), body: v.nonBlank("body", in.Body)}
			// The schema admits integers from 1 up; GitHub's numbers are 32-bit.
			if f, err := in.Number.Float64(); err != nil || f > math.MaxInt32 {
				v.fail("field %q must be an issue or pull request number, not %s", "number", in.Number.String())
			} else {
				a.number = int(f)
			}
			return a
		},
		identify: func(a commentArgs) tools.Identity {
			return tools.Identity{Effect: canonical(struct {
				Repo   string `json:"repo"`
				Number int    `json:"number"`
				Body   string `json:"body"`
			}{a.repo.Key(), a.number, a.body})}
		},
		summary: func(name string, a commentArgs) string {
			return fmt.Sprintf("%s %s #%d", name, a.repo, a.number)
		},
		run: func(ctx context.Context, opID string, a commentArgs) (tools.Result, error) {
			if err := requireOperationID("github_comment", opID); err != nil {
				return tools.Result{}, err
			}
			cm, _, err := c.Issues.CreateComment(ctx, a.repo.Owner, a.repo.Name, a.number,
				&gogithub.IssueComment{Body: gogithub.String(withMarker(a.body, opID))})
			if err != nil {
				return tools.Result{}, fmt.Errorf("github_comment: comment on %s#%d: %w", a.repo, a.number, err)
			}
			out := struct {
				ID      int64  `json:"id"`
				Number  int    `json:"number"`
				HTMLURL string `json:"html_url"`
			}{cm.GetID(), a.number, cm.GetHTMLURL()}
			return tools.Result{Output: output(out), ExternalID: cm.GetHTMLURL()}, nil
		},
	}
}
