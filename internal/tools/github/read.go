package github

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/tools/ghref"
	"github.com/capstanhq/capstan/tool"
)

// maxFileContent bounds the file content given back to the model; the rest
// would only fill its context window.
const maxFileContent = 64 << 10

// maxListedPulls bounds one github_list_pull_requests answer.
const maxListedPulls = 50

type getFileArgs struct {
	repo      ghref.Repo
	path, ref string
}

var getFileSchema = objectSchema([]string{"repo", "path"}, map[string]any{
	"repo": repoProp(),
	"path": stringProp(`File path relative to the repository root, e.g. "src/main.go".`),
	"ref":  stringProp("Branch, tag or commit SHA to read from. Defaults to the repository's default branch."),
})

func getFileTool(c *gogithub.Client) tool.Tool {
	return &ghTool[getFileArgs]{
		c:           c,
		name:        NameGetFile,
		description: "Read one file (or list one directory) of a GitHub repository at a branch, tag or commit.",
		class:       tool.ReadOnly,
		schema:      getFileSchema,
		parse: func(v *validator, raw json.RawMessage) getFileArgs {
			var in struct {
				Repo string `json:"repo"`
				Path string `json:"path"`
				Ref  string `json:"ref"`
			}
			v.decode(raw, &in)
			a := getFileArgs{repo: v.repo(in.Repo), path: v.path(in.Path), ref: in.Ref}
			if in.Ref != "" && !ghref.ValidRefName(in.Ref) {
				v.fail("field %q must be a branch, tag or commit SHA, but %q is not", "ref", in.Ref)
			}
			return a
		},
		target: func(a getFileArgs) tool.Target {
			return tool.Target{Repository: a.repo.String(), Branch: a.ref, Path: a.path}
		},
		identify: func(a getFileArgs) tool.Identity {
			return tool.Identity{Effect: canonical(struct {
				Repo string `json:"repo"`
				Path string `json:"path"`
				Ref  string `json:"ref"`
			}{a.repo.Key(), a.path, a.ref})}
		},
		summary: func(name string, a getFileArgs) string {
			if a.ref != "" {
				return fmt.Sprintf("%s %s %s@%s", name, a.repo, a.path, a.ref)
			}
			return fmt.Sprintf("%s %s %s", name, a.repo, a.path)
		},
		run: func(ctx context.Context, _ string, a getFileArgs) (tool.Result, error) {
			file, dir, _, err := c.Repositories.GetContents(ctx, a.repo.Owner, a.repo.Name, a.path,
				&gogithub.RepositoryContentGetOptions{Ref: a.ref})
			if err != nil {
				return tool.Result{}, fmt.Errorf("github_get_file: get %s from %s at %q: %w", a.path, a.repo, a.ref, err)
			}
			if dir != nil {
				return tool.Result{Output: output(dirListing(a, dir))}, nil
			}
			return tool.Result{Output: output(fileOutput(a, file))}, nil
		},
	}
}

type fileOut struct {
	Path      string `json:"path"`
	Ref       string `json:"ref,omitempty"`
	Type      string `json:"type"`
	SHA       string `json:"sha,omitempty"`
	Size      int    `json:"size"`
	Content   string `json:"content"`
	Truncated bool   `json:"truncated,omitempty"`
	Note      string `json:"note,omitempty"`
}

func fileOutput(a getFileArgs, f *gogithub.RepositoryContent) fileOut {
	out := fileOut{Path: a.path, Ref: a.ref, Type: f.GetType(), SHA: f.GetSHA(), Size: f.GetSize()}
	content, err := f.GetContent()
	switch {
	case f.GetType() != "file":
		out.Note = fmt.Sprintf("%s is a %s, not a regular file", a.path, f.GetType())
	case err != nil:
		// GitHub sends no inline content for files over 1 MB.
		out.Note = fmt.Sprintf("content not available through the contents API (%v)", err)
	case !utf8.ValidString(content):
		out.Note = "binary file; content not shown"
	case len(content) > maxFileContent:
		cut := maxFileContent
		for cut > 0 && !utf8.RuneStart(content[cut]) {
			cut--
		}
		out.Content, out.Truncated = content[:cut], true
		out.Note = fmt.Sprintf("content truncated to the first %d of %d bytes", cut, len(content))
	default:
		out.Content = content
	}
	return out
}

func dirListing(a getFileArgs, dir []*gogithub.RepositoryContent) any {
	type entry struct {
		Name string `json:"name"`
		Path string `json:"path"`
		Type string `json:"type"`
	}
	entries := make([]entry, 0, len(dir))
	for _, e := range dir {
		entries = append(entries, entry{Name: e.GetName(), Path: e.GetPath(), Type: e.GetType()})
	}
	return struct {
		Path    string  `json:"path"`
		Ref     string  `json:"ref,omitempty"`
		Type    string  `json:"type"`
		Entries []entry `json:"entries"`
	}{a.path, a.ref, "dir", entries}
}

type listPullsArgs struct {
	repo              ghref.Repo
	head, base, state string
}

var listPullRequestsSchema = objectSchema([]string{"repo"}, map[string]any{
	"repo":  repoProp(),
	"head":  stringProp(`Only pull requests from this branch of the repository, e.g. "agent/fix".`),
	"base":  stringProp(`Only pull requests into this branch, e.g. "main".`),
	"state": map[string]any{"type": "string", "enum": []string{"open", "closed", "all"}, "description": `Which pull requests to list; defaults to "open".`},
})

func listPullRequestsTool(c *gogithub.Client) tool.Tool {
	return &ghTool[listPullsArgs]{
		c:           c,
		name:        NameListPullRequests,
		description: fmt.Sprintf("List pull requests of a GitHub repository, newest first (at most %d), optionally filtered by head branch, base branch and state.", maxListedPulls),
		class:       tool.ReadOnly,
		schema:      listPullRequestsSchema,
		parse: func(v *validator, raw json.RawMessage) listPullsArgs {
			var in struct {
				Repo  string `json:"repo"`
				Head  string `json:"head"`
				Base  string `json:"base"`
				State string `json:"state"`
			}
			v.decode(raw, &in)
			a := listPullsArgs{repo: v.repo(in.Repo), head: in.Head, base: in.Base, state: in.State}
			if a.state == "" {
				a.state = "open" // absent; the schema admits no other empty value
			}
			// A head may already be "owner:branch" (a fork); git forbids ":"
			// in branch names, so the form is unambiguous.
			if owner, branch, fork := strings.Cut(a.head, ":"); a.head != "" {
				if !fork {
					branch = a.head
				}
				if (fork && !ghref.ValidOwner(owner)) || !ghref.ValidRefName(branch) {
					v.fail("field %q must be a branch name (or \"owner:branch\"), but %q is not", "head", a.head)
				}
			}
			if a.base != "" {
				v.branch("base", a.base)
			}
			return a
		},
		target: func(a listPullsArgs) tool.Target { return tool.Target{Repository: a.repo.String()} },
		identify: func(a listPullsArgs) tool.Identity {
			return tool.Identity{Effect: canonical(struct {
				Repo  string `json:"repo"`
				Head  string `json:"head"`
				Base  string `json:"base"`
				State string `json:"state"`
			}{a.repo.Key(), a.head, a.base, a.state})}
		},
		summary: func(name string, a listPullsArgs) string { return name + " " + a.repo.String() },
		run: func(ctx context.Context, _ string, a listPullsArgs) (tool.Result, error) {
			opts := &gogithub.PullRequestListOptions{State: a.state, Base: a.base,
				ListOptions: gogithub.ListOptions{PerPage: maxListedPulls}}
			if a.head != "" {
				// GitHub silently ignores a head filter without "owner:".
				opts.Head = a.head
				if !strings.Contains(a.head, ":") {
					opts.Head = a.repo.Owner + ":" + a.head
				}
			}
			prs, resp, err := c.PullRequests.List(ctx, a.repo.Owner, a.repo.Name, opts)
			if err != nil {
				return tool.Result{}, fmt.Errorf("github_list_pull_requests: list %s (head %q, base %q, state %s): %w", a.repo, a.head, a.base, a.state, err)
			}
			type pr struct {
				Number  int    `json:"number"`
				Title   string `json:"title"`
				State   string `json:"state"`
				Head    string `json:"head"`
				Base    string `json:"base"`
				HTMLURL string `json:"html_url"`
			}
			out := struct {
				PullRequests []pr `json:"pull_requests"`
				More         bool `json:"more,omitempty"`
			}{PullRequests: make([]pr, 0, len(prs)), More: resp.NextPage != 0}
			for _, p := range prs {
				state := p.GetState()
				if p.MergedAt != nil {
					state = "merged"
				}
				out.PullRequests = append(out.PullRequests, pr{p.GetNumber(), p.GetTitle(), state,
					p.GetHead().GetRef(), p.GetBase().GetRef(), p.GetHTMLURL()})
			}
			return tool.Result{Output: output(out)}, nil
		},
	}
}
