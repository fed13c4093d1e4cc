package github_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/tools"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// github_create_pull_request records, before it sends anything, the commit
// its head branch is at; it is the only GitHub tool that records facts.
func TestPullRequestPrepareRecordsTheHeadSHA(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	var preparer tools.Preparer
	for _, name := range f.tools.Names() {
		tool, _ := f.tools.Get(name)
		p, ok := tool.(tools.Preparer)
		if ok != (name == "github_create_pull_request") {
			t.Errorf("%s is a tools.Preparer: %v", name, ok)
		}
		if ok {
			preparer = p
		}
	}
	if preparer == nil {
		t.Fatal("github_create_pull_request is not a tools.Preparer")
	}
	call := tools.Call{OperationID: "op-pr", Arguments: json.RawMessage(
		`{"repo":"acme/app","head":"agent/fix","base":"main","title":"Fix","body":"Fixes."}`)}

	// No head branch yet: nothing to record, and no error — the request
	// itself is refused by GitHub if the branch is really missing.
	facts, err := preparer.Prepare(ctx, call)
	if err != nil || facts != nil {
		t.Fatalf("Prepare without the head branch: %s, %v; want no facts and no error", facts, err)
	}

	f.mustRun(t, "github_create_branch", "op-b", `{"repo":"acme/app","branch":"agent/fix","from":"main"}`)
	_, out := f.mustRun(t, "github_put_file", "op-f",
		`{"repo":"acme/app","branch":"agent/fix","path":"fix.md","content":"fixed\n","message":"Fix"}`)
	before := f.gh.Stats()
	facts, err = preparer.Prepare(ctx, call)
	if err != nil {
		t.Fatal(err)
	}
	var got githubtools.PullRequestFacts
	if err := json.Unmarshal(facts, &got); err != nil {
		t.Fatalf("facts %s: %v", facts, err)
	}
	if got.HeadSHA == "" || got.HeadSHA != out["commit_sha"] {
		t.Fatalf("facts %s, want head_sha %v (the branch's last commit)", facts, out["commit_sha"])
	}
	if after := f.gh.Stats(); after.Requests != before.Requests+1 || after.PullRequestsCreated != 0 ||
		after.FilesWritten != before.FilesWritten || after.BranchesCreated != before.BranchesCreated {
		t.Errorf("Prepare: stats %+v → %+v, want one read and no change", before, after)
	}

	// A read that fails is an error; a rate limit carries its wait.
	if err := f.gh.AddFault(sandbox.FaultRule{Endpoint: "git/get-ref", Kind: sandbox.FaultFail, Status: 502, Times: 1}); err != nil {
		t.Fatal(err)
	}
	if facts, err := preparer.Prepare(ctx, call); err == nil {
		t.Fatalf("Prepare with git/get-ref failing: %s, want an error", facts)
	}
	if err := f.gh.AddFault(sandbox.FaultRule{Endpoint: "git/get-ref", Kind: sandbox.FaultSecondaryRateLimit,
		Times: 1, RetryAfter: 7 * time.Second}); err != nil {
		t.Fatal(err)
	}
	_, err = preparer.Prepare(ctx, call)
	if wait, ok := tools.RetryAfter(err); !ok || wait <= 0 || wait > 7*time.Second {
		t.Fatalf("Prepare rate limited: %v; want an error carrying a wait of up to 7s", err)
	}
	if tools.Classify(err) != tools.VerdictNotSent {
		t.Errorf("Prepare rate limited: verdict %q, want %q", tools.Classify(err), tools.VerdictNotSent)
	}
}
