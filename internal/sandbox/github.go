package sandbox

import (
	"context"
	"crypto/sha1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// GitHub is an in-memory stand-in for the GitHub REST API. It serves, with
// GitHub's status codes and error bodies, the endpoints go-github v62 calls
// for: Repositories.Get; Git.GetRef and Git.CreateRef (branches only);
// Repositories.ListBranches, ListBranchesHeadCommit and CompareCommits
// (its status; AddUnreachableCommit makes a commit no branch reaches);
// Repositories.GetContents, CreateFile and UpdateFile; PullRequests.List,
// Create, Get and Edit (title, body, close and reopen); Issues.Create; and
// Issues.CreateComment and ListComments (per issue or repository-wide); and
// Users.Get("") (GET /user, the authenticated user); and, for a GitHub App
// (SetApp), Apps.Get, FindRepositoryInstallation and
// CreateInstallationToken. Unknown routes answer 404
// {"message":"Not Found"}. Authentication is counted, never required,
// except by GET /user (401 without a token), the Apps endpoints (the App's
// JWT), and for an installation token, which must be one the fake issued
// and has not expired.
//
// Every pull request, issue and comment records its author, the user of the
// token that wrote it, as "user" in its JSON: a token made by
// SandboxUserToken(login) is that login's, an installation token the App's
// bot's ("<slug>[bot]"), any other token — and a request
// without one — is GitHubLogin's, the sandbox's own account. So a test can
// write as someone other than capstan.
//
// Any "owner/name" repository exists on first touch, with a branch "main"
// holding README.md ("# <name>\n"). The API may be mounted under any path
// prefix (a GitHub Enterprise "/api/v3/" or a proxy path): everything from the
// first "/repos/" on is the API path. GET /_sandbox/stats returns Stats.
//
// Like GitHub, it refuses a pull request whose head has no commit its base
// lacks (422 "No commits between main and <head>") and a second open pull
// request for the same head and base (422 "A pull request already exists for
// owner:head."), both as a "Validation Failed" whose errors[0].message says
// so.
//
// Fault rules ([FaultRule], set with AddFault or /_sandbox/faults) name an
// endpoint by its operation id in GitHub's REST description: repos/get,
// git/get-ref, git/create-ref, repos/list-branches,
// repos/list-branches-for-head-commit, repos/compare-commits, repos/get-content,
// repos/create-or-update-file-contents, pulls/list, pulls/create, pulls/get,
// pulls/update, issues/create, issues/list-comments,
// issues/list-comments-for-repo, issues/create-comment. Every kind applies.
// Under lag, pulls/list and the two comment lists leave out pull requests
// and comments created less than the lag ago, and git/get-ref answers 404
// for a branch created less than the lag ago (GitHub serves reads from
// replicas, and a ref just created can be missing there); other reads, and
// a branch's later commits, do not lag.
//
// Guarantees: it is safe for concurrent use; an installed Fault or rule runs
// before any state changes, and the effect counters count only effects that
// were actually performed, once each, including the ones whose answer a
// fault then lost.
type GitHub struct {
	faultPoint
	faultRules
	control map[string]http.HandlerFunc // the /_sandbox/ endpoints

	mux *http.ServeMux
	now func() time.Time // read under dataMu

	dataMu sync.Mutex
	repos  map[string]*ghRepo // by lower-case "owner/name": GitHub is case-insensitive there
	seq    int64              // global ids (commits, pull requests, comments), like GitHub's
	stats  GitHubStats
	apps   appState // the GitHub App, when SetApp gave one (github_app.go)
}

// GitHubStats counts what the fake has seen and done.
type GitHubStats struct {
	// Requests counts the API requests the fake handled; a request a fault
	// answered in the fake's place (a refusal, or a SetFault fault that
	// answers) is not counted, one the fault let through is.
	Requests            int64 `json:"requests"`
	AuthorizedRequests  int64 `json:"authorized_requests"`
	BranchesCreated     int64 `json:"branches_created"`
	FilesWritten        int64 `json:"files_written"`
	PullRequestsCreated int64 `json:"pull_requests_created"`
	CommentsCreated     int64 `json:"comments_created"`
	// AppTokensIssued counts installation tokens issued (SetApp);
	// RefusedTokens the requests refused for an expired or unknown one
	// (both left out of /_sandbox/stats while 0).
	AppTokensIssued int64 `json:"app_tokens_issued,omitempty"`
	RefusedTokens   int64 `json:"refused_tokens,omitempty"`
}

// SandboxPR is a pull request as stored by the fake.
type SandboxPR struct {
	Number  int    `json:"number"`
	Head    string `json:"head"`
	Base    string `json:"base"`
	Title   string `json:"title"`
	Body    string `json:"body"`
	State   string `json:"state"`
	HeadSHA string `json:"head_sha"`
	Author  string `json:"author"` // the login of the user who opened it
}

// SandboxComment is an issue or pull request comment as stored by the fake.
type SandboxComment struct {
	ID        int64     `json:"id"`
	Author    string    `json:"author"` // the login of the user who wrote it
	Body      string    `json:"body"`
	CreatedAt time.Time `json:"created_at"`
}

type ghRepo struct {
	owner, name string
	id          int64
	created     time.Time
	branches    map[string]string    // branch name -> head commit sha
	defaultBr   string               // the default branch; "" means main
	branchMade  map[string]time.Time // branch name -> when git/create-ref made it; zero for main
	commits     map[string]*ghCommit
	issues      map[int]*ghIssue // pull requests are issues too, as on GitHub
	comments    []*ghComment     // in creation order
	lastNumber  int
}

type ghCommit struct {
	sha, parent, message string
	files                map[string][]byte // full snapshot; the fake favours clarity over space
	at                   time.Time
}

type ghIssue struct {
	number                       int
	id                           int64
	title, body, state           string
	created, updated             time.Time
	closed                       time.Time
	isPull                       bool
	draft                        bool
	head, base, headSHA, baseSHA string
	written                      time.Time // when it was created, not rounded: lagging reads compare it
	author                       string    // login of the user who opened it
}

type ghComment struct {
	id               int64
	number           int
	body             string
	author           string // login of the user who wrote it
	created, updated time.Time
	written          time.Time // when it was created, not rounded: lagging reads compare it
}

// ghURLs are the bases for the links the fake writes: web pages at the host
// root (like https://github.com/), API resources under the mount prefix.
type ghURLs struct{ web, api string }

type ghPrefixKey struct{}

// NewGitHub returns an empty fake.
func NewGitHub() *GitHub {
	g := &GitHub{repos: map[string]*ghRepo{}, now: time.Now, mux: http.NewServeMux()}
	const r = "/repos/{owner}/{repo}"
	routes := []struct {
		endpoint, pattern string
		handle            http.HandlerFunc
	}{
		{"repos/get", "GET " + r, g.getRepo},
		{"git/get-ref", "GET " + r + "/git/ref/{ref...}", g.getRef},
		{"git/create-ref", "POST " + r + "/git/refs", g.createRef},
		{"repos/list-branches", "GET " + r + "/branches", g.listBranches},
		{"repos/list-branches-for-head-commit", "GET " + r + "/commits/{sha}/branches-where-head", g.listBranchesForHeadCommit},
		{"repos/compare-commits", "GET " + r + "/compare/{basehead...}", g.compareCommits},
		{"repos/get-content", "GET " + r + "/contents/{path...}", g.getContents},
		{"repos/create-or-update-file-contents", "PUT " + r + "/contents/{path...}", g.putContents},
		{"pulls/list", "GET " + r + "/pulls", g.listPulls},
		{"pulls/create", "POST " + r + "/pulls", g.createPull},
		{"pulls/get", "GET " + r + "/pulls/{number}", g.getPull},
		{"pulls/update", "PATCH " + r + "/pulls/{number}", g.updatePull},
		{"issues/create", "POST " + r + "/issues", g.createIssue},
		{"issues/list-comments-for-repo", "GET " + r + "/issues/comments", g.listComments},
		// GET .../issues/{number}/comments and GET .../issues/comments/{id}
		// overlap as patterns; one route serves both (issueSubresource).
		{"issues/list-comments", "", g.listComments},
		{"issues/get-comment", "", g.getComment},
		{"issues/create-comment", "POST " + r + "/issues/{number}/comments", g.createComment},
		{"users/get-authenticated", "GET /user", g.getAuthenticatedUser},
		{"apps/get-authenticated", "GET /app", g.getApp},
		{"apps/get-repo-installation", "GET " + r + "/installation", g.getRepoInstallation},
		{"apps/get-installation", "GET /app/installations/{id}", g.getInstallation},
		{"apps/create-installation-access-token", "POST /app/installations/{id}/access_tokens", g.createInstallationToken},
	}
	endpoints := make([]string, 0, len(routes))
	for _, rt := range routes {
		if rt.pattern != "" {
			g.mux.Handle(rt.pattern, g.endpoint(rt.endpoint, rt.handle))
		}
		endpoints = append(endpoints, rt.endpoint)
	}
	g.mux.Handle("GET "+r+"/issues/{number}/{rest}", g.issueSubresource(
		g.endpoint("issues/list-comments", g.listComments), g.endpoint("issues/get-comment", g.getComment)))
	g.mux.Handle("/", g.endpoint("", func(w http.ResponseWriter, _ *http.Request) { ghError(w, http.StatusNotFound, "Not Found") }))
	g.initFaultRules(faultDialect{
		endpoints: endpoints,
		lagging:   []string{"git/get-ref", "pulls/list", "issues/list-comments", "issues/list-comments-for-repo"},
		kinds:     []FaultKind{FaultFail, FaultDrop, FaultDelay, FaultLag, FaultRateLimit, FaultSecondaryRateLimit},
		check:     checkGitHubRefusal,
		refuse:    g.refuse,
	})
	g.control = map[string]http.HandlerFunc{"stats": statsHandler(g.Stats), "faults": g.serveControl}
	return g
}

// ServeHTTP serves the API and the /_sandbox/ endpoints.
func (g *GitHub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serveFake(w, r, &g.faultPoint, g.control, http.HandlerFunc(g.serve))
}

// endpoint serves a route: the fault rule for the endpoint, if any, then the
// request counters, then handle.
func (g *GitHub) endpoint(name string, handle http.HandlerFunc) http.Handler {
	act := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r, ok := g.checkInstallationToken(w, r)
		if !ok {
			return
		}
		g.dataMu.Lock()
		g.stats.Requests++
		if r.Header.Get("Authorization") != "" {
			g.stats.AuthorizedRequests++
		}
		g.dataMu.Unlock()
		handle(w, r)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.serveEndpoint(name, w, r, act)
	})
}

// serve strips the mount prefix and dispatches to the API handlers.
func (g *GitHub) serve(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	i := strings.Index(p, "/repos/")
	if i < 0 && strings.HasSuffix(p, "/user") {
		i = len(p) - len("/user") // GET /user, under the same mount prefix
	}
	if i < 0 {
		i = appPathStart(p)
	}
	if i < 0 {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	r2 := r.Clone(context.WithValue(r.Context(), ghPrefixKey{}, p[:i]))
	r2.URL.Path = p[i:]
	r2.URL.RawPath = ""
	if j := strings.Index(r.URL.RawPath, "/repos/"); j >= 0 {
		r2.URL.RawPath = r.URL.RawPath[j:]
	}
	g.mux.ServeHTTP(w, r2)
}

// Stats returns a snapshot of the counters.
func (g *GitHub) Stats() GitHubStats {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	return g.stats
}

// PullRequests returns the pull requests of repo ("owner/name") by number.
func (g *GitHub) PullRequests(repo string) []SandboxPR {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	var out []SandboxPR
	if rp := g.repos[strings.ToLower(repo)]; rp != nil {
		for _, is := range rp.sortedIssues() {
			if is.isPull {
				out = append(out, SandboxPR{Number: is.number, Head: is.head, Base: is.base,
					Title: is.title, Body: is.body, State: is.state, HeadSHA: is.headSHA, Author: is.author})
			}
		}
	}
	return out
}

// Comments returns the comments on issue or pull request number of repo, oldest first.
func (g *GitHub) Comments(repo string, number int) []SandboxComment {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	var out []SandboxComment
	if rp := g.repos[strings.ToLower(repo)]; rp != nil {
		for _, c := range rp.comments {
			if c.number == number {
				out = append(out, SandboxComment{ID: c.id, Author: c.author, Body: c.body, CreatedAt: c.created})
			}
		}
	}
	return out
}

// stamp is the current time at GitHub's one-second resolution. The caller
// holds dataMu.
func (g *GitHub) stamp() time.Time { return ghStamp(g.now()) }

// ghStamp is t as GitHub shows it: UTC, to the second.
func ghStamp(t time.Time) time.Time { return t.UTC().Truncate(time.Second) }

// repoLocked returns the repository named in the request path, creating it on
// first touch. The caller holds dataMu.
func (g *GitHub) repoLocked(r *http.Request) *ghRepo {
	owner, name := r.PathValue("owner"), r.PathValue("repo")
	key := strings.ToLower(owner + "/" + name)
	if rp := g.repos[key]; rp != nil {
		return rp
	}
	g.seq++
	rp := &ghRepo{owner: owner, name: name, id: g.seq, created: g.stamp(), branches: map[string]string{},
		branchMade: map[string]time.Time{}, commits: map[string]*ghCommit{}, issues: map[int]*ghIssue{}}
	c := g.commitLocked(rp, "", map[string][]byte{"README.md": []byte("# " + name + "\n")}, "Initial commit")
	rp.branches["main"] = c.sha
	g.repos[key] = rp
	return rp
}

// commitLocked records a commit with a git-style sha. The caller holds dataMu.
func (g *GitHub) commitLocked(rp *ghRepo, parent string, files map[string][]byte, msg string) *ghCommit {
	g.seq++
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	tree := sha1.New()
	for _, p := range paths {
		fmt.Fprintf(tree, "%s %s\n", ghBlobSHA(files[p]), p)
	}
	body := fmt.Sprintf("tree %x\nparent %s\nserial %d\n\n%s", tree.Sum(nil), parent, g.seq, msg)
	c := &ghCommit{sha: ghObjectSHA("commit", []byte(body)), parent: parent, message: msg, files: files, at: g.stamp()}
	rp.commits[c.sha] = c
	return c
}

// resolveLocked maps a branch name, "heads/x", "refs/heads/x" or a commit sha
// to a commit. The caller holds dataMu.
func (rp *ghRepo) resolveLocked(ref string) *ghCommit {
	if ref == "" {
		ref = "main"
	}
	if sha, ok := rp.branches[strings.TrimPrefix(strings.TrimPrefix(ref, "refs/"), "heads/")]; ok {
		return rp.commits[sha]
	}
	return rp.commits[ref]
}

// reaches reports whether target is from or one of its ancestors. The caller
// holds dataMu.
func (rp *ghRepo) reaches(from, target string) bool {
	for sha := from; sha != ""; sha = rp.commits[sha].parent {
		if sha == target {
			return true
		}
	}
	return false
}

func (rp *ghRepo) sortedIssues() []*ghIssue {
	out := make([]*ghIssue, 0, len(rp.issues))
	for _, is := range rp.issues {
		out = append(out, is)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].number < out[j].number })
	return out
}

func (g *GitHub) getRepo(w http.ResponseWriter, r *http.Request) {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp, u := g.repoLocked(r), ghBases(r)
	writeJSONBody(w, http.StatusOK, map[string]any{"id": rp.id, "name": rp.name, "full_name": rp.owner + "/" + rp.name,
		"owner": ghUser(rp.owner), "private": false, "default_branch": rp.defaultBranch(),
		"html_url": u.web + rp.owner + "/" + rp.name, "url": u.api + "repos/" + rp.owner + "/" + rp.name,
		"created_at": rp.created, "updated_at": rp.created})
}

func (rp *ghRepo) full() string { return rp.owner + "/" + rp.name }

func (rp *ghRepo) refJSON(u ghURLs, branch, sha string) map[string]any {
	return map[string]any{"ref": "refs/heads/" + branch, "node_id": ghNodeID("REF", branch),
		"url":    u.api + "repos/" + rp.full() + "/git/refs/heads/" + branch,
		"object": map[string]any{"type": "commit", "sha": sha, "url": u.api + "repos/" + rp.full() + "/git/commits/" + sha}}
}

func ghBases(r *http.Request) ghURLs {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	prefix, _ := r.Context().Value(ghPrefixKey{}).(string)
	return ghURLs{web: scheme + "://" + r.Host + "/", api: scheme + "://" + r.Host + prefix + "/"}
}

// ghObjectSHA is git's object id: sha1 of "<kind> <len>\x00<data>".
func ghObjectSHA(kind string, data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "%s %d\x00", kind, len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

func ghBlobSHA(data []byte) string { return ghObjectSHA("blob", data) }

func ghNodeID(kind, s string) string {
	return kind + "_" + base64.RawURLEncoding.EncodeToString([]byte(s))
}

func ghUser(login string) map[string]any {
	return map[string]any{"login": login, "id": ghUserID(login), "type": "User"}
}

// ghValidBranch applies the parts of git check-ref-format that matter here.
func ghValidBranch(b string) bool {
	return b != "" && !strings.ContainsAny(b, " ~^:?*[\\\x7f") && !strings.Contains(b, "..") &&
		!strings.Contains(b, "//") && !strings.Contains(b, "@{") && !strings.HasPrefix(b, "/") &&
		!strings.HasSuffix(b, "/") && !strings.HasSuffix(b, ".") && !strings.HasSuffix(b, ".lock")
}

func ghDeref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// ghDecode reads a JSON request body, answering 400 "Problems parsing JSON"
// (GitHub's answer) when it is not.
func ghDecode(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		ghError(w, http.StatusBadRequest, "Problems parsing JSON")
		return false
	}
	return true
}

// ghError writes GitHub's error body; details become the "errors" array of a
// 422 "Validation Failed".
func ghError(w http.ResponseWriter, status int, msg string, details ...map[string]any) {
	body := map[string]any{"message": msg, "documentation_url": "https://docs.github.com/rest"}
	if len(details) > 0 {
		body["errors"] = details
	}
	writeJSONBody(w, status, body)
}
