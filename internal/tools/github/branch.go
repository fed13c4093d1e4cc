package github

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/internal/tools/ghref"
	"github.com/capstanhq/capstan/tool"
)

// github_create_branch: a conditional tool. Its business key is the branch
// ("branch:create:<owner>/<repo>:<branch>"); before it sends anything it
// records the commit its "from" branch is at and creates the branch there;
// its effect is found again by getting the branch's ref (branchEffect). A
// "from" commit must be on a branch of the repository (onABranch).

type createBranchArgs struct {
	repo         ghref.Repo
	branch, from string
	// at is the commit a "from" branch was at just before the request was
	// sent (BranchFacts); "" when from is a commit or nothing was recorded.
	at string
}

// branchTool is github_create_branch. It is a tool.Preparer: before the
// branch is created it records the commit the "from" branch is at
// (BranchFacts), creates the branch at that very commit, and its lookup
// (branchEffect) compares with it — not with where "from" is by the time
// it looks, which on a busy repository has moved on.
type branchTool struct {
	findable[createBranchArgs]
}

// BranchFacts are what github_create_branch records before it sends its
// request.
type BranchFacts struct {
	// FromSHA is the commit the "from" branch pointed at just before the
	// request was sent: the commit the branch is created at.
	FromSHA string `json:"from_sha"`
}

// Prepare reads the "from" branch's ref and returns BranchFacts. A "from"
// that is a commit needs nothing recorded; a "from" branch GitHub does not
// show (404) gives no facts and no error: Execute then resolves it itself,
// refusing a branch that does not exist, as before facts were recorded. Any
// other failure to read is an error carrying its verdict, and the wait a
// rate limit asked for.
func (t branchTool) Prepare(ctx context.Context, call tool.Call) (json.RawMessage, error) {
	a, err := t.args(call.Arguments)
	if err != nil {
		return nil, err
	}
	if t.c == nil || shaRE.MatchString(a.from) {
		return nil, nil // no client: Execute refuses the call, sending nothing
	}
	ref, _, err := t.c.Git.GetRef(ctx, a.repo.Owner, a.repo.Name, "heads/"+a.from)
	switch {
	case HTTPStatus(err) == http.StatusNotFound:
		return nil, nil
	case err != nil:
		return nil, marked(fmt.Errorf("github_create_branch: read branch %s of %s: %w", a.from, a.repo, err))
	}
	return output(BranchFacts{FromSHA: ref.GetObject().GetSHA()}), nil
}

// withBranchFacts reads the facts github_create_branch recorded into its
// arguments.
func withBranchFacts(a createBranchArgs, facts json.RawMessage) (createBranchArgs, error) {
	var f BranchFacts
	if err := json.Unmarshal(facts, &f); err != nil {
		return a, fmt.Errorf("%s: the facts recorded before sending do not decode: %w", NameCreateBranch, err)
	}
	if f.FromSHA != "" && !shaRE.MatchString(f.FromSHA) {
		return a, fmt.Errorf("%s: the facts recorded before sending name no commit: from_sha %q", NameCreateBranch, f.FromSHA)
	}
	a.at = f.FromSHA
	return a, nil
}

// createBranchKey opens the business key of every github_create_branch
// operation: "branch:create:<owner>/<repo>:<branch>".
const createBranchKey = "branch:create:"

// CreatedBranch reads the repository and branch from the business key of
// a github_create_branch operation (tool.BranchCreator). A repository's
// name holds no ":", so the first one after the prefix ends it; a branch's
// name may not hold one either (git check-ref-format).
func (t branchTool) CreatedBranch(businessKey string) (tool.Target, bool) {
	rest, ok := strings.CutPrefix(businessKey, createBranchKey)
	if !ok {
		return tool.Target{}, false
	}
	repo, branch, ok := strings.Cut(rest, ":")
	if !ok || repo == "" || branch == "" {
		return tool.Target{}, false
	}
	return tool.Target{Repository: repo, Branch: branch, CreatesBranch: true}, true
}

var createBranchSchema = objectSchema([]string{"repo", "branch", "from"}, map[string]any{
	"repo":   repoProp(),
	"branch": stringProp(`Name of the branch to create, e.g. "agent/fix-typo".`),
	"from":   stringProp(`Existing branch name (e.g. "main") or full 40-character commit SHA to start the branch at.`),
})

func createBranchTool(c *gogithub.Client) tool.Tool {
	return branchTool{findable[createBranchArgs]{&ghTool[createBranchArgs]{
		c:           c,
		name:        NameCreateBranch,
		description: "Create a new branch in a GitHub repository, pointing at the head of another branch or at a commit. Fails if the branch already exists.",
		class:       tool.Conditional,
		schema:      createBranchSchema,
		parse: func(v *validator, raw json.RawMessage) createBranchArgs {
			var in struct {
				Repo   string `json:"repo"`
				Branch string `json:"branch"`
				From   string `json:"from"`
			}
			v.decode(raw, &in)
			a := createBranchArgs{repo: v.repo(in.Repo), branch: v.newBranch("branch", in.Branch), from: in.From}
			if !shaRE.MatchString(in.From) {
				v.branch("from", in.From)
			}
			return a
		},
		target: func(a createBranchArgs) tool.Target {
			return tool.Target{Repository: a.repo.String(), Branch: a.branch, From: a.from, CreatesBranch: true}
		},
		identify: func(a createBranchArgs) tool.Identity {
			return tool.Identity{
				BusinessKey: createBranchKey + a.repo.Key() + ":" + a.branch,
				Effect: canonical(struct {
					Repo   string `json:"repo"`
					Branch string `json:"branch"`
					From   string `json:"from"`
				}{a.repo.Key(), a.branch, a.from}),
			}
		},
		recorded: withBranchFacts,
		find: func(a createBranchArgs, s tool.Sent) (tool.Effect, error) {
			if len(s.Facts) > 0 {
				var err error
				if a, err = withBranchFacts(a, s.Facts); err != nil {
					return nil, err
				}
			}
			return branchEffect{c: c, repo: a.repo, branch: a.branch, from: a.from, at: a.at}, nil
		},
		summary: func(name string, a createBranchArgs) string {
			return fmt.Sprintf("%s %s %s from %s", name, a.repo, a.branch, a.from)
		},
		run: func(ctx context.Context, _ string, a createBranchArgs) (tool.Result, error) {
			sha := a.from
			if shaRE.MatchString(a.from) {
				if err := onABranch(ctx, c, a.repo, a.from); err != nil {
					return tool.Result{}, err
				}
			}
			if a.at != "" {
				sha = a.at // where from was when it was recorded, which the lookup goes by
			} else if !shaRE.MatchString(sha) {
				ref, _, err := c.Git.GetRef(ctx, a.repo.Owner, a.repo.Name, "heads/"+a.from)
				if HTTPStatus(err) == http.StatusNotFound {
					return tool.Result{}, fmt.Errorf("github_create_branch: %w: branch %s does not exist in %s: start the branch from a branch, or from a commit of one", tool.ErrRefused, a.from, a.repo)
				}
				if err != nil {
					return tool.Result{}, fmt.Errorf("github_create_branch: resolve branch %q of %s: %w: %w", a.from, a.repo, errWriteNotSent, err)
				}
				sha = ref.GetObject().GetSHA()
			}
			ref, _, err := c.Git.CreateRef(ctx, a.repo.Owner, a.repo.Name, &gogithub.Reference{
				Ref: gogithub.String("refs/heads/" + a.branch), Object: &gogithub.GitObject{SHA: gogithub.String(sha)}})
			if err != nil {
				return tool.Result{}, fmt.Errorf("github_create_branch: create %s in %s at %s: %w", a.branch, a.repo, sha, err)
			}
			sha = ref.GetObject().GetSHA()
			out := struct {
				Ref  string `json:"ref"`
				SHA  string `json:"sha"`
				From string `json:"from"`
			}{ref.GetRef(), sha, a.from}
			return tool.Result{Output: output(out), ExternalID: ref.GetRef() + "@" + sha}, nil
		},
	}}}
}

// branchEffect is the branch a github_create_branch call creates. A branch
// carries no mark of who made it, so the lookup goes by where it points:
// at the commit "from" names — for a "from" branch, the commit it was at
// when the request was sent, as recorded (at).
type branchEffect struct {
	c            *gogithub.Client
	repo         ghref.Repo
	branch, from string // from: a branch name, or a full commit SHA
	// at is the commit the from branch was at when the request was sent
	// (BranchFacts); "" when from is a commit, or for an operation sent
	// before the commit was recorded: then the lookup compares with where
	// the from branch is now.
	at string
}

func (e branchEffect) Key() string {
	switch {
	case shaRE.MatchString(e.from):
		return fmt.Sprintf("branch %s of %s, at commit %s", e.branch, e.repo, e.from)
	case e.at != "":
		return fmt.Sprintf("branch %s of %s, at commit %s, where branch %s was when it was sent", e.branch, e.repo, e.at, e.from)
	}
	return fmt.Sprintf("branch %s of %s, at the commit branch %s is at", e.branch, e.repo, e.from)
}

// Find gets the branch's ref. Missing (404) is NotSeen. Present at the
// commit from names is Found ("refs/heads/<branch>@<sha>", as Execute
// records it): for a from branch, the commit it was at when the request was
// sent, so a from branch that moved on since (main on a busy repository)
// does not hide the operation's branch. Present at another commit is
// Ambiguous: someone else created the branch, or it moved since; nothing
// here can tell which. For an operation sent before that commit was
// recorded, the from branch's commit now is all there is to compare with.
func (e branchEffect) Find(ctx context.Context) (tool.Observation, error) {
	ref, err := e.getRef(ctx, e.branch)
	switch {
	case notFound(err):
		return tool.Observation{Outcome: tool.NotSeen, Detail: fmt.Sprintf("branch %s does not exist in %s", e.branch, e.repo)}, nil
	case err != nil:
		return tool.Observation{}, err
	}
	at := ref.GetObject().GetSHA()

	want, fromWhat := e.from, "commit "+e.from
	if e.at != "" {
		want, fromWhat = e.at, fmt.Sprintf("commit %s, where branch %s was when the request was sent", e.at, e.from)
	} else if !shaRE.MatchString(e.from) {
		fromRef, err := e.getRef(ctx, e.from)
		switch {
		case notFound(err):
			return tool.Observation{Outcome: tool.Ambiguous, Detail: fmt.Sprintf(
				"branch %s exists in %s at %s, but the branch %s it was to be created from no longer exists, so nothing tells whether this operation made it",
				e.branch, e.repo, at, e.from)}, nil
		case err != nil:
			return tool.Observation{}, err
		}
		want, fromWhat = fromRef.GetObject().GetSHA(), "branch "+e.from+" (now at "+fromRef.GetObject().GetSHA()+")"
	}
	if at != want {
		return tool.Observation{Outcome: tool.Ambiguous, Detail: fmt.Sprintf(
			"branch %s exists in %s at %s, not at %s: someone else created it, or a branch moved after it was created",
			e.branch, e.repo, at, fromWhat)}, nil
	}
	return tool.Observation{Outcome: tool.Found, ExternalID: "refs/heads/" + e.branch + "@" + at,
		Detail: fmt.Sprintf("branch %s exists in %s at %s, as %s", e.branch, e.repo, at, fromWhat)}, nil
}

func (e branchEffect) getRef(ctx context.Context, branch string) (*gogithub.Reference, error) {
	ref, _, err := e.c.Git.GetRef(ctx, e.repo.Owner, e.repo.Name, "heads/"+branch)
	if err != nil {
		return nil, fmt.Errorf("get branch %s of %s: %w", branch, e.repo, err)
	}
	return ref, nil
}

// maxCompared bounds the branches onABranch compares a commit with, past
// the default branch.
const maxCompared = 20

// onABranch refuses (tool.ErrRefused, one sentence) a commit that no
// branch of repo reaches: GitHub serves a fork's pull request commits from
// the repository it was opened against, so a branch created at one would
// put code nobody with write access pushed where the repository's
// workflows run it with its secrets. The commit passes when it is a
// branch's head (branches-where-head), else when the default branch
// reaches it, else when one of the first maxCompared other branches does
// (compare: "identical" or "behind"). A question GitHub did not answer is
// an error carrying errWriteNotSent: nothing was sent, so the call can be
// made again.
func onABranch(ctx context.Context, c *gogithub.Client, repo ghref.Repo, sha string) error {
	notSent := func(what string, err error) error {
		return fmt.Errorf("github_create_branch: %s of %s: %w: %w", what, repo, errWriteNotSent, err)
	}
	heads, _, err := c.Repositories.ListBranchesHeadCommit(ctx, repo.Owner, repo.Name, sha)
	switch st := HTTPStatus(err); {
	case st == http.StatusNotFound || st == http.StatusUnprocessableEntity:
		return fmt.Errorf("github_create_branch: %w: commit %s does not exist in %s: start the branch from a branch, or from a commit of one", tool.ErrRefused, sha, repo)
	case err != nil:
		return notSent("read the branches at commit "+sha, err)
	case len(heads) > 0:
		return nil
	}
	r, _, err := c.Repositories.Get(ctx, repo.Owner, repo.Name)
	if err != nil {
		return notSent("read the default branch", err)
	}
	def := r.GetDefaultBranch()
	reaches := func(branch string) (bool, error) {
		cmp, _, err := c.Repositories.CompareCommits(ctx, repo.Owner, repo.Name, branch, sha, &gogithub.ListOptions{PerPage: 1})
		if err != nil {
			return false, notSent("compare commit "+sha+" with branch "+branch, err)
		}
		return cmp.GetStatus() == "identical" || cmp.GetStatus() == "behind", nil
	}
	if ok, err := reaches(def); ok || err != nil {
		return err
	}
	compared, more := 0, false
	opts := &gogithub.BranchListOptions{ListOptions: gogithub.ListOptions{PerPage: perPage}}
	for page := 0; page < maxPages; page++ {
		branches, resp, err := c.Repositories.ListBranches(ctx, repo.Owner, repo.Name, opts)
		if err != nil {
			return notSent("list the branches", err)
		}
		for _, b := range branches {
			if b.GetName() == def {
				continue
			}
			if compared == maxCompared {
				more = true
				break
			}
			compared++
			if ok, err := reaches(b.GetName()); ok || err != nil {
				return err
			}
		}
		if more || resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	others := fmt.Sprintf("any of its %d other branches", compared)
	if more {
		others = fmt.Sprintf("the first %d of its other branches", compared)
	}
	return fmt.Errorf("github_create_branch: %w: commit %s is not on a branch of %s (neither its default branch %s nor %s reaches it, as a fork's pull request commit is not): start the branch from a branch, or from a commit of one",
		tool.ErrRefused, sha, repo, def, others)
}
