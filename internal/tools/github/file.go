package github

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/tools/ghref"
	"github.com/capstanhq/capstan/tool"
)

// github_put_file: an idempotent tool, with no business key (see its
// identify). Its effect is the content in place, found by reading the file
// back (fileEffect), which both its Verify and its reconciler do.

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
// tool.Verifier: reading the file back (fileEffect) tells whether a write
// whose answer was lost landed.
type putFileTool struct {
	findable[putFileArgs]
}

func newPutFileTool(c *gogithub.Client) tool.Tool {
	return putFileTool{findable[putFileArgs]{&ghTool[putFileArgs]{
		c:           c,
		name:        NamePutFile,
		description: "Create or replace one file on an existing branch of a GitHub repository with the given content, as one commit. Writing content the file already has changes nothing.",
		class:       tool.Idempotent,
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
		target: func(a putFileArgs) tool.Target {
			return tool.Target{Repository: a.repo.String(), Branch: a.branch, Path: a.path}
		},
		identify: func(a putFileArgs) tool.Identity {
			// The content defines the effect (by its blob sha, to keep the
			// effect small); the commit message does not. There is no
			// business key: a write is safe to repeat (it reads first and
			// writes with the expected blob sha), so every declared call is
			// its own operation. A key would make a later write of the same
			// content (a revert, say) replay an old success and send nothing.
			sha := blobSHA([]byte(a.content))
			return tool.Identity{
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
		run: func(ctx context.Context, opID string, a putFileArgs) (tool.Result, error) {
			return putFile(ctx, c, opID, a)
		},
		find: func(a putFileArgs, _ tool.Sent) (tool.Effect, error) { return newFileEffect(c, a), nil },
	}}}
}

// putFileOutput is github_put_file's answer to the model.
type putFileOutput struct {
	Path      string `json:"path"`
	Branch    string `json:"branch"`
	BlobSHA   string `json:"blob_sha"`
	CommitSHA string `json:"commit_sha,omitempty"`
	Changed   bool   `json:"changed"`
}

// Verify reads the file on the branch (fileEffect): the content in place
// means the write landed, with the result a write would have given, less
// the commit sha, which a read of the file does not tell; a missing file,
// or another content, means it did not; a failed read cannot tell.
func (t putFileTool) Verify(ctx context.Context, call tool.Call) (tool.Result, bool, error) {
	a, err := t.args(call.Arguments)
	if err != nil {
		return tool.Result{}, false, err
	}
	if t.c == nil {
		return tool.Result{}, false, fmt.Errorf("%s: %w: no GitHub client configured", t.name, tool.ErrRefused)
	}
	e := newFileEffect(t.c, a)
	obs, err := e.Find(ctx)
	switch {
	case err != nil:
		return tool.Result{}, false, fmt.Errorf("github_put_file: reading back: %w", err)
	case obs.Outcome != tool.Found:
		return tool.Result{}, false, nil
	}
	return tool.Result{Output: output(putFileOutput{a.path, a.branch, e.blob, "", true}), ExternalID: e.blob}, true, nil
}

// putFile makes the file hold a.content with a compare-and-set on the blob
// sha read first: identical content is a no-op (so a repeat after an unknown
// outcome writes nothing), and a concurrent change in between makes GitHub
// refuse the write (409) instead of silently overwriting it.
func putFile(ctx context.Context, c *gogithub.Client, opID string, a putFileArgs) (tool.Result, error) {
	content := []byte(a.content)
	want := blobSHA(content)
	current := ""
	file, dir, _, err := c.Repositories.GetContents(ctx, a.repo.Owner, a.repo.Name, a.path,
		&gogithub.RepositoryContentGetOptions{Ref: a.branch})
	switch {
	case HTTPStatus(err) == http.StatusNotFound:
		// Absent; if the branch is what is missing, the write says so.
	case err != nil:
		return tool.Result{}, fmt.Errorf("github_put_file: read %s on %s of %s: %w: %w", a.path, a.branch, a.repo, errWriteNotSent, err)
	case dir != nil || file.GetType() != "file":
		return tool.Result{}, fmt.Errorf("github_put_file: %w: %s on %s of %s is not a regular file", tool.ErrRefused, a.path, a.branch, a.repo)
	default:
		current = file.GetSHA()
	}
	if current == want {
		return tool.Result{Output: output(putFileOutput{a.path, a.branch, want, "", false}), ExternalID: want}, nil
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
		return tool.Result{}, fmt.Errorf("github_put_file: write %s on %s of %s (expected blob %q): %w: %w", a.path, a.branch, a.repo, current, tool.ErrChangedSinceRead, err)
	}
	if err != nil {
		return tool.Result{}, fmt.Errorf("github_put_file: write %s on %s of %s (expected blob %q): %w", a.path, a.branch, a.repo, current, err)
	}
	sha := resp.GetContent().GetSHA()
	return tool.Result{Output: output(putFileOutput{a.path, a.branch, sha, resp.Commit.GetSHA(), true}), ExternalID: sha}, nil
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

// fileEffect is the content a github_put_file call writes. The write is a
// compare-and-set on the blob SHA, so content that is there is content
// that was written, whoever wrote it — and writing it again changes
// nothing.
type fileEffect struct {
	c            *gogithub.Client
	repo         ghref.Repo
	branch, path string
	blob         string // the git blob SHA of the content to be written
}

func newFileEffect(c *gogithub.Client, a putFileArgs) fileEffect {
	return fileEffect{c: c, repo: a.repo, branch: a.branch, path: a.path, blob: blobSHA([]byte(a.content))}
}

func (e fileEffect) where() string { return fmt.Sprintf("%s on %s of %s", e.path, e.branch, e.repo) }

func (e fileEffect) Key() string { return fmt.Sprintf("%s holding blob %s", e.where(), e.blob) }

// Find reads the file on the branch: holding exactly the content (its blob
// SHA is the content's) is Found, with that SHA as Execute records it;
// missing, or holding anything else, is NotSeen.
func (e fileEffect) Find(ctx context.Context) (tool.Observation, error) {
	file, dir, _, err := e.c.Repositories.GetContents(ctx, e.repo.Owner, e.repo.Name, e.path,
		&gogithub.RepositoryContentGetOptions{Ref: e.branch})
	where := e.where()
	switch {
	case notFound(err):
		return tool.Observation{Outcome: tool.NotSeen, Detail: where + " does not exist"}, nil
	case err != nil:
		return tool.Observation{}, fmt.Errorf("read %s: %w", where, err)
	case dir != nil || file.GetType() != "file":
		return tool.Observation{Outcome: tool.NotSeen, Detail: where + " is not a regular file"}, nil
	case file.GetSHA() != e.blob:
		return tool.Observation{Outcome: tool.NotSeen, Detail: fmt.Sprintf("%s holds blob %s, not the content's %s", where, file.GetSHA(), e.blob)}, nil
	}
	return tool.Observation{Outcome: tool.Found, ExternalID: e.blob, Detail: fmt.Sprintf("%s holds the content (blob %s)", where, e.blob)}, nil
}
