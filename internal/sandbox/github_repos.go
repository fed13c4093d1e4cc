package sandbox

import (
	"net/http"
	"strings"
)

// defaultBranch is the repository's default branch: main unless
// SetDefaultBranch said otherwise.
func (rp *ghRepo) defaultBranch() string {
	if rp.defaultBr == "" {
		return "main"
	}
	return rp.defaultBr
}

// SetDefaultBranch makes branch the default branch of repo ("owner/name"),
// which GET /repos/{owner}/{repo} reports, creating the repository as any
// request would and the branch, at main's commit, when missing.
func (g *GitHub) SetDefaultBranch(repo, branch string) {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp := g.repoNamedLocked(repo)
	if _, ok := rp.branches[branch]; !ok {
		rp.branches[branch] = rp.branches["main"]
	}
	rp.defaultBr = branch
}

// repoNamedLocked is repoLocked for a test's call that names the
// repository ("owner/name") instead of a request's path. Callers hold
// dataMu.
func (g *GitHub) repoNamedLocked(repo string) *ghRepo {
	owner, name, _ := strings.Cut(repo, "/")
	r := &http.Request{}
	r.SetPathValue("owner", owner)
	r.SetPathValue("repo", name)
	return g.repoLocked(r)
}
