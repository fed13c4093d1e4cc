package sandbox

import (
	"net/http"
	"sort"
	"strings"
)

// The branch queries of the GitHub fake, which github_create_branch asks
// before it creates a branch at a commit: the branches a commit is the head
// of, the comparison of two commits, and the list of branches.

// listBranchesForHeadCommit answers GET /repos/{owner}/{repo}/commits/{sha}/branches-where-head:
// the branches whose head is the commit, by name; 422 for a commit the
// repository does not hold, as GitHub answers.
func (g *GitHub) listBranchesForHeadCommit(w http.ResponseWriter, r *http.Request) {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp, sha, u := g.repoLocked(r), r.PathValue("sha"), ghBases(r)
	c := rp.resolveLocked(sha)
	if c == nil {
		ghError(w, http.StatusUnprocessableEntity, "No commit found for SHA: "+sha)
		return
	}
	out := []map[string]any{}
	for _, name := range rp.branchNames() {
		if rp.branches[name] == c.sha {
			out = append(out, rp.branchJSON(u, name))
		}
	}
	writeJSONBody(w, http.StatusOK, out)
}

// compareCommits answers GET /repos/{owner}/{repo}/compare/{base}...{head}
// with GitHub's status: identical, behind (base reaches head: head is in
// base's history), ahead (head reaches base) or diverged; 404 when either
// names nothing. Commits and files are left out: nothing here reads them.
func (g *GitHub) compareCommits(w http.ResponseWriter, r *http.Request) {
	base, head, ok := strings.Cut(r.PathValue("basehead"), "...")
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp := g.repoLocked(r)
	b, h := rp.resolveLocked(base), rp.resolveLocked(head)
	if !ok || base == "" || head == "" || b == nil || h == nil {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	status, ahead, behind := "diverged", 0, 0
	switch {
	case b.sha == h.sha:
		status = "identical"
	case rp.reaches(b.sha, h.sha):
		status, behind = "behind", rp.distance(b.sha, h.sha)
	case rp.reaches(h.sha, b.sha):
		status, ahead = "ahead", rp.distance(h.sha, b.sha)
	}
	u := ghBases(r)
	writeJSONBody(w, http.StatusOK, map[string]any{"status": status, "ahead_by": ahead, "behind_by": behind, "total_commits": ahead,
		"base_commit": rp.commitJSON(u, b), "commits": []any{}, "files": []any{}})
}

// listBranches answers GET /repos/{owner}/{repo}/branches: every branch,
// by name, in pages (per_page, page, Link), as GitHub lists them.
func (g *GitHub) listBranches(w http.ResponseWriter, r *http.Request) {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp, u := g.repoLocked(r), ghBases(r)
	names := rp.branchNames()
	lo, hi := ghPaginate(w, r, len(names))
	out := make([]map[string]any, 0, hi-lo)
	for _, name := range names[lo:hi] {
		out = append(out, rp.branchJSON(u, name))
	}
	writeJSONBody(w, http.StatusOK, out)
}

// AddUnreachableCommit records, in repo ("owner/name"), a commit on top of
// main's head that no branch reaches — as a pull request from a fork
// leaves one in the repository GitHub shares its objects with — and
// returns its sha.
func (g *GitHub) AddUnreachableCommit(repo string, files map[string]string) string {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp := g.repoNamedLocked(repo)
	head := rp.commits[rp.branches["main"]]
	all := make(map[string][]byte, len(head.files)+len(files))
	for k, v := range head.files {
		all[k] = v
	}
	for k, v := range files {
		all[k] = []byte(v)
	}
	return g.commitLocked(rp, head.sha, all, "A commit from a fork").sha
}

// branchNames are the repository's branches, sorted. The caller holds
// dataMu.
func (rp *ghRepo) branchNames() []string {
	names := make([]string, 0, len(rp.branches))
	for name := range rp.branches {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// distance is how many commits from is past target, which it reaches. The
// caller holds dataMu.
func (rp *ghRepo) distance(from, target string) int {
	n := 0
	for sha := from; sha != target && sha != ""; sha = rp.commits[sha].parent {
		n++
	}
	return n
}

func (rp *ghRepo) branchJSON(u ghURLs, name string) map[string]any {
	sha := rp.branches[name]
	return map[string]any{"name": name, "protected": false,
		"commit": map[string]any{"sha": sha, "url": u.api + "repos/" + rp.full() + "/commits/" + sha}}
}
