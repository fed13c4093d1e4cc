package sandbox

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Pull requests, issues and issue comments of the GitHub fake. Pull requests
// and issues share one number sequence per repository, as on GitHub, so a
// comment on issue N may target either.

// listPulls serves pulls/list. Under a FaultLag it leaves out the pull
// requests created less than the lag ago.
func (g *GitHub) listPulls(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state, sortBy, dir := q.Get("state"), q.Get("sort"), q.Get("direction")
	if state == "" {
		state = "open"
	}
	if dir == "" {
		dir = "asc"
		if sortBy == "" || sortBy == "created" {
			dir = "desc"
		}
	}
	switch {
	case state != "open" && state != "closed" && state != "all":
		ghError(w, http.StatusUnprocessableEntity, "Validation Failed", ghInvalid("PullRequest", "state"))
		return
	case sortBy != "" && sortBy != "created" && sortBy != "updated" && sortBy != "popularity" && sortBy != "long-running":
		ghError(w, http.StatusUnprocessableEntity, "Validation Failed", ghInvalid("PullRequest", "sort"))
		return
	case dir != "asc" && dir != "desc":
		ghError(w, http.StatusUnprocessableEntity, "Validation Failed", ghInvalid("PullRequest", "direction"))
		return
	}
	// GitHub only honours head as "owner:branch"; a bare branch name is
	// silently ignored (a classic mistake the fake reproduces on purpose).
	headOwner, headBranch, headOK := strings.Cut(q.Get("head"), ":")
	base := q.Get("base")

	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp, u := g.repoLocked(r), ghBases(r)
	cutoff, lagging := lagCutoff(r, g.now())
	var match []*ghIssue
	for _, is := range rp.sortedIssues() {
		if !is.isPull || (state != "all" && is.state != state) || (base != "" && is.base != base) ||
			(headOK && (!strings.EqualFold(headOwner, rp.owner) || is.head != headBranch)) ||
			(lagging && is.written.After(cutoff)) {
			continue
		}
		match = append(match, is)
	}
	comments := rp.commentCounts()
	key := func(is *ghIssue) int64 {
		switch sortBy {
		case "updated":
			return is.updated.Unix()
		case "popularity":
			return int64(comments[is.number])
		default: // created; long-running is approximated by age
			return is.created.Unix()
		}
	}
	sort.SliceStable(match, func(i, j int) bool {
		a, b := match[i], match[j]
		if dir == "desc" {
			a, b = b, a
		}
		if ka, kb := key(a), key(b); ka != kb {
			return ka < kb
		}
		return a.number < b.number
	})
	lo, hi := ghPaginate(w, r, len(match))
	out := make([]map[string]any, 0, hi-lo)
	for _, is := range match[lo:hi] {
		out = append(out, rp.pullJSON(u, is, comments[is.number]))
	}
	writeJSONBody(w, http.StatusOK, out)
}

// createPull serves pulls/create. Like GitHub, it refuses a second open pull
// request for the same head and base, and a head with no commit its base
// lacks.
func (g *GitHub) createPull(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Title, Head, Base, Body string
		Draft                   bool
	}
	if !ghDecode(w, r, &in) {
		return
	}
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp := g.repoLocked(r)
	head := in.Head
	if owner, branch, ok := strings.Cut(in.Head, ":"); ok {
		head = branch
		if !strings.EqualFold(owner, rp.owner) {
			head = "" // forks do not exist in the fake
		}
	}
	headSHA, headOK := rp.branches[head]
	baseSHA, baseOK := rp.branches[in.Base]
	for _, f := range []struct{ name, v string }{{"title", in.Title}, {"head", in.Head}, {"base", in.Base}} {
		if strings.TrimSpace(f.v) == "" {
			ghError(w, http.StatusUnprocessableEntity, "Validation Failed",
				map[string]any{"resource": "PullRequest", "code": "missing_field", "field": f.name})
			return
		}
	}
	switch {
	case !headOK:
		ghError(w, http.StatusUnprocessableEntity, "Validation Failed", ghInvalid("PullRequest", "head"))
		return
	case !baseOK:
		ghError(w, http.StatusUnprocessableEntity, "Validation Failed", ghInvalid("PullRequest", "base"))
		return
	}
	if dup := rp.openPull(head, in.Base); dup != nil {
		ghError(w, http.StatusUnprocessableEntity, "Validation Failed", map[string]any{"resource": "PullRequest",
			"code": "custom", "message": "A pull request already exists for " + rp.owner + ":" + head + "."})
		return
	}
	if rp.reaches(baseSHA, headSHA) {
		ghError(w, http.StatusUnprocessableEntity, "Validation Failed", map[string]any{"resource": "PullRequest",
			"code": "custom", "message": "No commits between " + in.Base + " and " + in.Head})
		return
	}
	written := g.now()
	now := ghStamp(written)
	g.seq++
	rp.lastNumber++
	author, _ := ghLogin(r)
	is := &ghIssue{number: rp.lastNumber, id: g.seq, title: in.Title, body: in.Body, state: "open", author: author,
		created: now, updated: now, written: written, isPull: true, draft: in.Draft,
		head: head, base: in.Base, headSHA: headSHA, baseSHA: baseSHA}
	rp.issues[is.number] = is
	g.stats.PullRequestsCreated++
	writeJSONBody(w, http.StatusCreated, rp.pullJSON(ghBases(r), is, 0))
}

func (g *GitHub) getPull(w http.ResponseWriter, r *http.Request) {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp := g.repoLocked(r)
	is := rp.issueLocked(r)
	if is == nil || !is.isPull {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSONBody(w, http.StatusOK, rp.pullJSON(ghBases(r), is, rp.commentCounts()[is.number]))
}

// updatePull edits title, body or state (closing and reopening), so tests can
// build closed pull requests through the API.
func (g *GitHub) updatePull(w http.ResponseWriter, r *http.Request) {
	var in struct{ Title, Body, State *string }
	if !ghDecode(w, r, &in) {
		return
	}
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp := g.repoLocked(r)
	is := rp.issueLocked(r)
	switch {
	case is == nil || !is.isPull:
		ghError(w, http.StatusNotFound, "Not Found")
		return
	case in.State != nil && *in.State != "open" && *in.State != "closed":
		ghError(w, http.StatusUnprocessableEntity, "Validation Failed", ghInvalid("PullRequest", "state"))
		return
	case in.State != nil && *in.State == "open" && is.state == "closed":
		if _, ok := rp.branches[is.head]; !ok || rp.openPull(is.head, is.base) != nil {
			ghError(w, http.StatusUnprocessableEntity, "Validation Failed", map[string]any{"resource": "PullRequest",
				"code": "custom", "message": "state cannot be changed. The " + is.head + " branch has been deleted or a pull request already exists."})
			return
		}
		is.state, is.closed, is.headSHA = "open", time.Time{}, rp.branches[is.head]
	case in.State != nil && *in.State == "closed" && is.state == "open":
		is.state, is.closed = "closed", g.stamp()
	}
	if in.Title != nil {
		is.title = *in.Title
	}
	if in.Body != nil {
		is.body = *in.Body
	}
	is.updated = g.stamp()
	writeJSONBody(w, http.StatusOK, rp.pullJSON(ghBases(r), is, rp.commentCounts()[is.number]))
}

// createIssue exists so deliveries can target a plain issue in the sandbox.
func (g *GitHub) createIssue(w http.ResponseWriter, r *http.Request) {
	var in struct{ Title, Body string }
	if !ghDecode(w, r, &in) {
		return
	}
	if strings.TrimSpace(in.Title) == "" {
		ghError(w, http.StatusUnprocessableEntity, "Validation Failed",
			map[string]any{"resource": "Issue", "code": "missing_field", "field": "title"})
		return
	}
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp, now := g.repoLocked(r), g.stamp()
	g.seq++
	rp.lastNumber++
	author, _ := ghLogin(r)
	is := &ghIssue{number: rp.lastNumber, id: g.seq, title: in.Title, body: in.Body, state: "open", author: author, created: now, updated: now}
	rp.issues[is.number] = is
	u, link := ghBases(r), rp.full()+"/issues/"+strconv.Itoa(is.number)
	writeJSONBody(w, http.StatusCreated, map[string]any{"id": is.id, "node_id": ghNodeID("I", link), "number": is.number,
		"url": u.api + "repos/" + link, "html_url": u.web + link, "title": is.title, "body": is.body,
		"state": is.state, "user": ghUser(is.author), "comments": 0, "created_at": now, "updated_at": now, "closed_at": nil})
}

func (g *GitHub) createComment(w http.ResponseWriter, r *http.Request) {
	var in struct{ Body string }
	if !ghDecode(w, r, &in) {
		return
	}
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp := g.repoLocked(r)
	is := rp.issueLocked(r)
	switch {
	case is == nil:
		ghError(w, http.StatusNotFound, "Not Found")
		return
	case strings.TrimSpace(in.Body) == "":
		ghError(w, http.StatusUnprocessableEntity, "Validation Failed",
			map[string]any{"resource": "IssueComment", "code": "missing_field", "field": "body"})
		return
	}
	written := g.now()
	now := ghStamp(written)
	g.seq++
	author, _ := ghLogin(r)
	c := &ghComment{id: g.seq, number: is.number, body: in.Body, author: author, created: now, updated: now, written: written}
	rp.comments = append(rp.comments, c)
	is.updated = now
	g.stats.CommentsCreated++
	writeJSONBody(w, http.StatusCreated, rp.commentJSON(ghBases(r), c))
}

// listComments serves both the per-issue and the repository-wide list,
// oldest first; since keeps comments updated at or after that instant. Under
// a FaultLag it leaves out the comments created less than the lag ago.
func (g *GitHub) listComments(w http.ResponseWriter, r *http.Request) {
	var since time.Time
	if s := r.URL.Query().Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			ghError(w, http.StatusUnprocessableEntity, "Validation Failed", ghInvalid("IssueComment", "since"))
			return
		}
		since = t
	}
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp := g.repoLocked(r)
	number := 0
	if r.PathValue("number") != "" {
		is := rp.issueLocked(r)
		if is == nil {
			ghError(w, http.StatusNotFound, "Not Found")
			return
		}
		number = is.number
	}
	cutoff, lagging := lagCutoff(r, g.now())
	var match []*ghComment
	for _, c := range rp.comments {
		if (number == 0 || c.number == number) && !c.updated.Before(since) && !(lagging && c.written.After(cutoff)) {
			match = append(match, c)
		}
	}
	lo, hi := ghPaginate(w, r, len(match))
	out := make([]map[string]any, 0, hi-lo)
	for _, c := range match[lo:hi] {
		out = append(out, rp.commentJSON(ghBases(r), c))
	}
	writeJSONBody(w, http.StatusOK, out)
}

// issueSubresource serves GET .../issues/{number}/comments (list) and GET
// .../issues/comments/{id} (get), which overlap as mux patterns.
func (g *GitHub) issueSubresource(list, get http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.PathValue("number") == "comments":
			get.ServeHTTP(w, r)
		case r.PathValue("rest") == "comments":
			list.ServeHTTP(w, r)
		default:
			ghError(w, http.StatusNotFound, "Not Found")
		}
	})
}

// getComment serves one comment by its id, as GitHub does: at once, never
// lagging.
func (g *GitHub) getComment(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("rest"), 10, 64)
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp := g.repoLocked(r)
	if err == nil && rp != nil {
		for _, c := range rp.comments {
			if c.id == id {
				writeJSONBody(w, http.StatusOK, rp.commentJSON(ghBases(r), c))
				return
			}
		}
	}
	ghError(w, http.StatusNotFound, "Not Found")
}

// issueLocked returns the issue or pull request named by the "number" path
// value, or nil. The caller holds dataMu.
func (rp *ghRepo) issueLocked(r *http.Request) *ghIssue {
	n, err := strconv.Atoi(r.PathValue("number"))
	if err != nil {
		return nil
	}
	return rp.issues[n]
}

func (rp *ghRepo) openPull(head, base string) *ghIssue {
	for _, is := range rp.issues {
		if is.isPull && is.state == "open" && is.head == head && is.base == base {
			return is
		}
	}
	return nil
}

func (rp *ghRepo) commentCounts() map[int]int {
	n := map[int]int{}
	for _, c := range rp.comments {
		n[c.number]++
	}
	return n
}

func (rp *ghRepo) pullJSON(u ghURLs, is *ghIssue, comments int) map[string]any {
	link := rp.full() + "/pull/" + strconv.Itoa(is.number)
	api := u.api + "repos/" + rp.full()
	side := func(branch, sha string) map[string]any {
		return map[string]any{"label": rp.owner + ":" + branch, "ref": branch, "sha": sha, "user": ghUser(rp.owner),
			"repo": map[string]any{"id": rp.id, "name": rp.name, "full_name": rp.full(), "owner": ghUser(rp.owner),
				"html_url": u.web + rp.full(), "url": api, "default_branch": rp.defaultBranch()}}
	}
	var closed any
	if !is.closed.IsZero() {
		closed = is.closed
	}
	return map[string]any{"id": is.id, "node_id": ghNodeID("PR", link), "number": is.number,
		"url": api + "/pulls/" + strconv.Itoa(is.number), "html_url": u.web + link,
		"diff_url": u.web + link + ".diff", "patch_url": u.web + link + ".patch",
		"issue_url": api + "/issues/" + strconv.Itoa(is.number),
		"state":     is.state, "locked": false, "title": is.title, "body": is.body, "user": ghUser(is.author),
		"created_at": is.created, "updated_at": is.updated, "closed_at": closed, "merged_at": nil, "merged": false,
		"draft": is.draft, "comments": comments, "author_association": "OWNER",
		"head": side(is.head, is.headSHA), "base": side(is.base, is.baseSHA)}
}

func (rp *ghRepo) commentJSON(u ghURLs, c *ghComment) map[string]any {
	kind := "issues"
	if is := rp.issues[c.number]; is != nil && is.isPull {
		kind = "pull"
	}
	api := u.api + "repos/" + rp.full()
	return map[string]any{"id": c.id, "node_id": ghNodeID("IC", strconv.FormatInt(c.id, 10)),
		"url":       api + "/issues/comments/" + strconv.FormatInt(c.id, 10),
		"html_url":  fmt.Sprintf("%s%s/%s/%d#issuecomment-%d", u.web, rp.full(), kind, c.number, c.id),
		"issue_url": api + "/issues/" + strconv.Itoa(c.number), "body": c.body, "user": ghUser(c.author),
		"created_at": c.created, "updated_at": c.updated, "author_association": "OWNER"}
}

// ghPaginate applies per_page (default 30, at most 100) and page to n items,
// writes GitHub's Link header, and returns the slice bounds.
func ghPaginate(w http.ResponseWriter, r *http.Request, n int) (lo, hi int) {
	q := r.URL.Query()
	per, _ := strconv.Atoi(q.Get("per_page"))
	switch {
	case per <= 0:
		per = 30
	case per > 100:
		per = 100
	}
	page, _ := strconv.Atoi(q.Get("page"))
	page = max(page, 1)
	last := max((n+per-1)/per, 1)
	link := func(p int, rel string) string {
		q.Set("page", strconv.Itoa(p))
		return fmt.Sprintf(`<%s%s?%s>; rel=%q`, ghBases(r).api, strings.TrimPrefix(r.URL.Path, "/"), q.Encode(), rel)
	}
	var links []string
	if page < last {
		links = append(links, link(page+1, "next"), link(last, "last"))
	}
	if page > 1 {
		links = append(links, link(1, "first"), link(min(page-1, last), "prev"))
	}
	if len(links) > 0 {
		w.Header().Set("Link", strings.Join(links, ", "))
	}
	lo = min((page-1)*per, n)
	return lo, min(lo+per, n)
}

func ghInvalid(resource, field string) map[string]any {
	return map[string]any{"resource": resource, "field": field, "code": "invalid"}
}
