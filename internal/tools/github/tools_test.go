package github_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// Every tool runs against the real sandbox fake through NewClient, the way a
// worker runs them against GitHub.

type fixture struct {
	gh    *sandbox.GitHub
	tools *tool.Registry
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	gh := sandbox.NewGitHub()
	srv := httptest.NewServer(gh)
	t.Cleanup(srv.Close)
	c, err := githubtools.NewClient(srv.URL, "test-token", srv.Client())
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{gh: gh, tools: tool.NewRegistry(githubtools.Tools(c)...)}
}

// run executes one call and decodes its output into a map.
func (f *fixture) run(t *testing.T, name, opID, args string) (tool.Result, map[string]any, error) {
	t.Helper()
	impl, err := f.tools.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	res, err := impl.Execute(context.Background(), tool.Call{OperationID: opID, Arguments: json.RawMessage(args)})
	if err != nil {
		return res, nil, err
	}
	var out map[string]any
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("%s output %s: %v", name, res.Output, err)
	}
	return res, out, nil
}

func (f *fixture) mustRun(t *testing.T, name, opID, args string) (tool.Result, map[string]any) {
	t.Helper()
	res, out, err := f.run(t, name, opID, args)
	if err != nil {
		t.Fatalf("%s %s: %v", name, args, err)
	}
	return res, out
}

func TestBranchFilePullRequestFlow(t *testing.T) {
	f := newFixture(t)
	branch, out := f.mustRun(t, "github_create_branch", "op-b", `{"repo":"acme/app","branch":"agent/fix","from":"main"}`)
	if sha, _ := out["sha"].(string); len(sha) != 40 || branch.ExternalID != "refs/heads/agent/fix@"+sha {
		t.Errorf("branch: external id %q, output %v", branch.ExternalID, out)
	}

	put := `{"repo":"acme/app","branch":"agent/fix","path":"docs/fix.md","content":"fixed\n","message":"Fix docs"}`
	first, out := f.mustRun(t, "github_put_file", "op-f", put)
	if out["changed"] != true || out["commit_sha"] == "" || first.ExternalID != out["blob_sha"] {
		t.Errorf("put: %v, external id %q", out, first.ExternalID)
	}
	again, out := f.mustRun(t, "github_put_file", "op-f", put)
	if out["changed"] != false || again.ExternalID != first.ExternalID {
		t.Errorf("repeated put: %v, external id %q, want %q", out, again.ExternalID, first.ExternalID)
	}

	pr, out := f.mustRun(t, "github_create_pull_request", "tenant:task-1:create_pr:pr:create:acme/app:agent/fix:main",
		`{"repo":"acme/app","head":"agent/fix","base":"main","title":"Fix docs","body":"Fixes the docs."}`)
	if out["number"] != 1.0 || out["head"] != "agent/fix" || out["base"] != "main" || pr.ExternalID != out["html_url"] ||
		!strings.HasSuffix(pr.ExternalID, "/acme/app/pull/1") {
		t.Errorf("pr: %v, external id %q", out, pr.ExternalID)
	}
	stored := f.gh.PullRequests("acme/app")
	wantBody := "Fixes the docs.\n\n<!-- capstan-op: tenant:task-1:create_pr:pr:create:acme/app:agent/fix:main -->"
	if len(stored) != 1 || stored[0].Body != wantBody || stored[0].Title != "Fix docs" {
		t.Errorf("stored PRs = %+v, want body %q", stored, wantBody)
	}

	s := f.gh.Stats()
	if s.BranchesCreated != 1 || s.FilesWritten != 1 || s.PullRequestsCreated != 1 {
		t.Errorf("stats = %+v, want one branch, one file, one pull request", s)
	}
	if s.AuthorizedRequests != s.Requests {
		t.Errorf("stats = %+v: every request should carry the token", s)
	}

	// A duplicate is refused by GitHub, definitely.
	_, _, err := f.run(t, "github_create_pull_request", "op-2", `{"repo":"acme/app","head":"agent/fix","base":"main","title":"again","body":""}`)
	if v := tool.Classify(err); v != tool.VerdictFailed || githubtools.HTTPStatus(err) != http.StatusUnprocessableEntity {
		t.Errorf("duplicate PR: %v → %q", err, v)
	}
	_, _, err = f.run(t, "github_create_branch", "op-b2", `{"repo":"acme/app","branch":"agent/fix","from":"main"}`)
	if v := tool.Classify(err); v != tool.VerdictFailed || !strings.Contains(err.Error(), "Reference already exists") {
		t.Errorf("existing branch: %v → %q", err, v)
	}
}

func TestPutFileUpdatesWithExpectedSHA(t *testing.T) {
	f := newFixture(t)
	f.mustRun(t, "github_create_branch", "b", `{"repo":"acme/app","branch":"dev","from":"main"}`)
	_, out := f.mustRun(t, "github_put_file", "p1", `{"repo":"acme/app","branch":"dev","path":"README.md","content":"# new\n","message":"m"}`)
	if out["changed"] != true {
		t.Fatalf("update README: %v", out)
	}
	_, out = f.mustRun(t, "github_get_file", "", `{"repo":"acme/app","path":"README.md","ref":"dev"}`)
	if out["content"] != "# new\n" || out["ref"] != "dev" {
		t.Errorf("read back %v", out)
	}
	_, out = f.mustRun(t, "github_get_file", "", `{"repo":"acme/app","path":"README.md"}`)
	if out["content"] != "# app\n" || len(out["sha"].(string)) != 40 {
		t.Errorf("main README %v", out)
	}
	f.mustRun(t, "github_put_file", "p4", `{"repo":"acme/app","branch":"dev","path":"src/app/main.go","content":"package main\n","message":"m"}`)
	_, out = f.mustRun(t, "github_get_file", "", `{"repo":"acme/app","path":"src","ref":"dev"}`)
	if entries, _ := out["entries"].([]any); out["type"] != "dir" || len(entries) != 1 || entries[0].(map[string]any)["path"] != "src/app" {
		t.Errorf("directory listing %v", out)
	}
	_, _, err := f.run(t, "github_put_file", "p2", `{"repo":"acme/app","branch":"gone","path":"x.md","content":"","message":"m"}`)
	if v := tool.Classify(err); v != tool.VerdictFailed || githubtools.HTTPStatus(err) != http.StatusNotFound {
		t.Errorf("missing branch: %v → %q", err, v)
	}
	_, _, err = f.run(t, "github_put_file", "p3", `{"repo":"acme/app","branch":"dev","path":"docs","content":"x","message":"m"}`)
	if err != nil {
		t.Fatal(err)
	}
	if s := f.gh.Stats(); s.FilesWritten != 3 {
		t.Errorf("FilesWritten = %d, want 3", s.FilesWritten)
	}
}

func TestGetFileTruncatesLargeContent(t *testing.T) {
	f := newFixture(t)
	big := strings.Repeat("é", 40<<10) // 80 KiB of two-byte runes
	args, _ := json.Marshal(map[string]string{"repo": "acme/app", "branch": "main", "path": "big.txt", "content": big, "message": "big"})
	f.mustRun(t, "github_put_file", "p", string(args))
	_, out := f.mustRun(t, "github_get_file", "", `{"repo":"acme/app","path":"big.txt"}`)
	content, _ := out["content"].(string)
	if out["truncated"] != true || len(content) > 64<<10 || !strings.HasPrefix(big, content) || !strings.Contains(out["note"].(string), "truncated") {
		t.Errorf("truncated=%v len=%d note=%v", out["truncated"], len(content), out["note"])
	}
}

func TestListPullRequestsFilters(t *testing.T) {
	f := newFixture(t)
	for _, b := range []string{"agent/a", "agent/b"} {
		f.mustRun(t, "github_create_branch", "b-"+b, `{"repo":"acme/app","branch":"`+b+`","from":"main"}`)
		f.mustRun(t, "github_put_file", "f-"+b, `{"repo":"acme/app","branch":"`+b+`","path":"a.md","content":"a\n","message":"a"}`)
		f.mustRun(t, "github_create_pull_request", "pr-"+b, `{"repo":"acme/app","head":"`+b+`","base":"main","title":"t","body":""}`)
	}
	count := func(args string) int {
		t.Helper()
		_, out := f.mustRun(t, "github_list_pull_requests", "", args)
		prs, ok := out["pull_requests"].([]any)
		if !ok {
			t.Fatalf("output %v", out)
		}
		return len(prs)
	}
	for args, want := range map[string]int{
		`{"repo":"acme/app"}`:                                  2,
		`{"repo":"acme/app","head":"agent/a"}`:                 1,
		`{"repo":"acme/app","head":"acme:agent/b"}`:            1,
		`{"repo":"acme/app","head":"agent/zzz"}`:               0,
		`{"repo":"acme/app","base":"main"}`:                    2,
		`{"repo":"acme/app","base":"dev"}`:                     0,
		`{"repo":"acme/app","head":"agent/a","state":"all"}`:   1,
		`{"repo":"acme/app","state":"closed"}`:                 0,
		`{"repo":"acme/app","head":"agent/a","base":"main"}`:   1,
		`{"repo":"acme/other","head":"agent/a","base":"main"}`: 0,
	} {
		if got := count(args); got != want {
			t.Errorf("%s: %d pull requests, want %d", args, got, want)
		}
	}
	_, out := f.mustRun(t, "github_list_pull_requests", "", `{"repo":"acme/app","head":"agent/a"}`)
	pr := out["pull_requests"].([]any)[0].(map[string]any)
	if pr["number"] != 1.0 || pr["head"] != "agent/a" || pr["base"] != "main" || pr["state"] != "open" || pr["title"] != "t" ||
		!strings.HasSuffix(pr["html_url"].(string), "/acme/app/pull/1") {
		t.Errorf("listed %v", pr)
	}
}

func TestCommentCarriesMarker(t *testing.T) {
	f := newFixture(t)
	f.mustRun(t, "github_create_branch", "b", `{"repo":"acme/app","branch":"x","from":"main"}`)
	f.mustRun(t, "github_put_file", "f", `{"repo":"acme/app","branch":"x","path":"a.md","content":"a\n","message":"a"}`)
	f.mustRun(t, "github_create_pull_request", "pr", `{"repo":"acme/app","head":"x","base":"main","title":"t","body":"b"}`)
	res, out := f.mustRun(t, "github_comment", "t:task:3:comment:uuid-1", `{"repo":"acme/app","number":1,"body":"Done."}`)
	if !strings.Contains(res.ExternalID, "/acme/app/pull/1#issuecomment-") || out["html_url"] != res.ExternalID || out["number"] != 1.0 {
		t.Errorf("comment: %v, external id %q", out, res.ExternalID)
	}
	cs := f.gh.Comments("acme/app", 1)
	if len(cs) != 1 || cs[0].Body != "Done.\n\n"+githubtools.Marker("t:task:3:comment:uuid-1") {
		t.Errorf("stored comments %+v", cs)
	}
	_, _, err := f.run(t, "github_comment", "c2", `{"repo":"acme/app","number":42,"body":"hi"}`)
	if v := tool.Classify(err); v != tool.VerdictFailed {
		t.Errorf("comment on a missing issue: %v → %q", err, v)
	}
	if s := f.gh.Stats(); s.CommentsCreated != 1 {
		t.Errorf("CommentsCreated = %d, want 1", s.CommentsCreated)
	}
}

func TestMutationsWithoutOperationIDSendNothing(t *testing.T) {
	f := newFixture(t)
	before := f.gh.Stats().Requests
	for name, args := range map[string]string{
		"github_create_pull_request": `{"repo":"acme/app","head":"x","base":"main","title":"t","body":""}`,
		"github_comment":             `{"repo":"acme/app","number":1,"body":"hi"}`,
	} {
		if _, _, err := f.run(t, name, "", args); tool.Classify(err) != tool.VerdictFailed {
			t.Errorf("%s without operation id: %v", name, err)
		}
	}
	if got := f.gh.Stats().Requests; got != before {
		t.Errorf("%d requests sent, want none", got-before)
	}
}

// A failed read before the write proves the write was not sent; a lost answer
// to the write itself is unknown.
func TestPutFileClassifiesReadAndWriteFailures(t *testing.T) {
	f := newFixture(t)
	put := `{"repo":"acme/app","branch":"main","path":"a.txt","content":"a","message":"m"}`
	f.gh.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		if r.Method != http.MethodGet {
			return false
		}
		w.WriteHeader(http.StatusBadGateway)
		return true
	})
	if _, _, err := f.run(t, "github_put_file", "p", put); tool.Classify(err) != tool.VerdictNotSent {
		t.Errorf("read failed: %v → %q, want not_sent", err, tool.Classify(err))
	}
	f.gh.SetFault(func(w http.ResponseWriter, r *http.Request, next http.Handler) bool {
		if r.Method != http.MethodPut {
			return false
		}
		next.ServeHTTP(httptest.NewRecorder(), r)
		w.WriteHeader(http.StatusBadGateway)
		return true
	})
	if _, _, err := f.run(t, "github_put_file", "p", put); tool.Classify(err) != tool.VerdictUnknown {
		t.Errorf("answer lost: %v → %q, want unknown", err, tool.Classify(err))
	}
	f.gh.SetFault(nil)
	// The retry the idempotent class allows finds the content in place.
	if _, out := f.mustRun(t, "github_put_file", "p", put); out["changed"] != false {
		t.Errorf("retry after a lost answer: %v", out)
	}
	if s := f.gh.Stats(); s.FilesWritten != 1 {
		t.Errorf("FilesWritten = %d, want 1", s.FilesWritten)
	}
}

// github_put_file reads its effect back: only the content it writes, on its
// branch and path, counts as in place.
func TestPutFileVerifyReadsTheWriteBack(t *testing.T) {
	f := newFixture(t)
	impl, err := f.tools.Get("github_put_file")
	if err != nil {
		t.Fatal(err)
	}
	verifier, ok := impl.(tool.Verifier)
	if !ok {
		t.Fatal("github_put_file is not a tool.Verifier")
	}
	for _, name := range []string{"github_create_branch", "github_create_pull_request", "github_comment"} {
		if other, _ := f.tools.Get(name); other != nil {
			if _, ok := other.(tool.Verifier); ok {
				t.Errorf("%s claims to verify: only an idempotent write can be settled by reading", name)
			}
		}
	}
	call := tool.Call{OperationID: "op-v", Arguments: json.RawMessage(`{"repo":"acme/app","branch":"main","path":"docs/a.md","content":"v2\n","message":"m"}`)}
	verify := func(when string, wantLanded bool) tool.Result {
		t.Helper()
		res, landed, err := verifier.Verify(context.Background(), call)
		if err != nil || landed != wantLanded {
			t.Fatalf("%s: Verify = %v, %v; want landed %v", when, landed, err, wantLanded)
		}
		return res
	}
	verify("file missing", false)
	f.mustRun(t, "github_put_file", "op-v1", `{"repo":"acme/app","branch":"main","path":"docs/a.md","content":"v1\n","message":"m"}`)
	verify("other content", false)
	written, _ := f.mustRun(t, "github_put_file", "op-v", string(call.Arguments))
	res := verify("written", true)
	var out map[string]any
	if err := json.Unmarshal(res.Output, &out); err != nil || res.ExternalID != written.ExternalID || out["blob_sha"] != written.ExternalID || out["path"] != "docs/a.md" {
		t.Errorf("verified result = %s (%s), want the written blob %s", res.Output, res.ExternalID, written.ExternalID)
	}
	f.gh.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
		w.WriteHeader(http.StatusBadGateway)
		return true
	})
	if _, landed, err := verifier.Verify(context.Background(), call); err == nil || landed {
		t.Errorf("read failing: Verify = %v, %v; want an error: it cannot tell", landed, err)
	}
	if s := f.gh.Stats(); s.FilesWritten != 2 {
		t.Errorf("FilesWritten = %d, want 2: Verify never writes", s.FilesWritten)
	}
}

// A write refused because the file is no longer what the read before it
// showed is marked ErrChangedSinceRead: a 409 for a stale blob sha, a 422
// asking for a sha when a file appeared. It stays a refusal.
func TestPutFileMarksAWriteOverAChangedFile(t *testing.T) {
	f := newFixture(t)
	const get = "/repos/acme/app/contents/a.md?ref=main"
	read := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		f.gh.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, get, nil))
		return rec
	}
	missing := read() // 404: the file does not exist yet
	f.mustRun(t, "github_put_file", "op-1", `{"repo":"acme/app","branch":"main","path":"a.md","content":"v1","message":"m"}`)
	v1 := read()
	f.mustRun(t, "github_put_file", "op-2", `{"repo":"acme/app","branch":"main","path":"a.md","content":"v2","message":"m"}`)
	for _, stale := range []*httptest.ResponseRecorder{v1, missing} {
		f.gh.SetFault(func(w http.ResponseWriter, r *http.Request, _ http.Handler) bool {
			if r.Method != http.MethodGet {
				return false
			}
			for k, v := range stale.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(stale.Code)
			_, _ = w.Write(stale.Body.Bytes())
			return true
		})
		_, _, err := f.run(t, "github_put_file", "op-3", `{"repo":"acme/app","branch":"main","path":"a.md","content":"v3","message":"m"}`)
		if !errors.Is(err, tool.ErrChangedSinceRead) || tool.Classify(err) != tool.VerdictFailed {
			t.Errorf("read showed %d: err = %v (%q), want ErrChangedSinceRead, failed", stale.Code, err, tool.Classify(err))
		}
	}
	if s := f.gh.Stats(); s.FilesWritten != 2 {
		t.Errorf("FilesWritten = %d, want 2", s.FilesWritten)
	}
}
