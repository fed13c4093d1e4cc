package github_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/sandbox"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
	"github.com/capstanhq/capstan/tool"
)

// preparers are the GitHub tools that record facts before they send
// anything, by name; every other tool records none.
func preparers(t *testing.T, f *fixture) map[string]tool.Preparer {
	t.Helper()
	want := map[string]bool{"github_create_pull_request": true, "github_create_branch": true}
	out := map[string]tool.Preparer{}
	for _, name := range f.tools.Names() {
		impl, _ := f.tools.Get(name)
		p, ok := impl.(tool.Preparer)
		if ok != want[name] {
			t.Errorf("%s is a tool.Preparer: %v", name, ok)
		}
		if ok {
			out[name] = p
		}
	}
	return out
}

// github_create_pull_request records, before it sends anything, the commit
// its head branch is at.
func TestPullRequestPrepareRecordsTheHeadSHA(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	preparer := preparers(t, f)["github_create_pull_request"]
	if preparer == nil {
		t.Fatal("github_create_pull_request is not a tool.Preparer")
	}
	call := tool.Call{OperationID: "op-pr", Arguments: json.RawMessage(
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
	if wait, ok := tool.RetryAfter(err); !ok || wait <= 0 || wait > 7*time.Second {
		t.Fatalf("Prepare rate limited: %v; want an error carrying a wait of up to 7s", err)
	}
	if tool.Classify(err) != tool.VerdictNotSent {
		t.Errorf("Prepare rate limited: verdict %q, want %q", tool.Classify(err), tool.VerdictNotSent)
	}
}

// github_create_branch records, before it sends anything, the commit its
// "from" branch is at, and creates the branch at that commit even when the
// "from" branch has moved on by the time the request is sent.
func TestBranchPrepareRecordsTheFromSHA(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	preparer := preparers(t, f)["github_create_branch"]
	if preparer == nil {
		t.Fatal("github_create_branch is not a tool.Preparer")
	}
	args := json.RawMessage(`{"repo":"acme/app","branch":"agent/fix","from":"main"}`)

	// A commit needs nothing recorded; a missing "from" branch gives no
	// facts and no error (Execute refuses it).
	if facts, err := preparer.Prepare(ctx, tool.Call{OperationID: "op-sha", Arguments: json.RawMessage(
		`{"repo":"acme/app","branch":"agent/x","from":"` + strings.Repeat("a", 40) + `"}`)}); err != nil || facts != nil {
		t.Errorf("Prepare from a commit: %s, %v; want no facts and no error", facts, err)
	}
	if facts, err := preparer.Prepare(ctx, tool.Call{OperationID: "op-gone", Arguments: json.RawMessage(
		`{"repo":"acme/app","branch":"agent/x","from":"gone"}`)}); err != nil || facts != nil {
		t.Errorf("Prepare from a missing branch: %s, %v; want no facts and no error", facts, err)
	}

	// Make main's commit known, then record it.
	_, out := f.mustRun(t, "github_put_file", "op-f0",
		`{"repo":"acme/app","branch":"main","path":"a.md","content":"a\n","message":"A"}`)
	recorded, _ := out["commit_sha"].(string)
	before := f.gh.Stats()
	facts, err := preparer.Prepare(ctx, tool.Call{OperationID: "op-b", Arguments: args})
	if err != nil {
		t.Fatal(err)
	}
	var got githubtools.BranchFacts
	if err := json.Unmarshal(facts, &got); err != nil || got.FromSHA != recorded {
		t.Fatalf("facts %s (%v), want from_sha %s (main's commit)", facts, err, recorded)
	}
	if after := f.gh.Stats(); after.Requests != before.Requests+1 || after.BranchesCreated != 0 || after.FilesWritten != before.FilesWritten {
		t.Errorf("Prepare: stats %+v → %+v, want one read and no change", before, after)
	}

	// main moves on before the request is sent: the branch is created at
	// the commit recorded.
	f.mustRun(t, "github_put_file", "op-f1", `{"repo":"acme/app","branch":"main","path":"b.md","content":"b\n","message":"B"}`)
	impl, _ := f.tools.Get("github_create_branch")
	res, err := impl.Execute(ctx, tool.Call{OperationID: "op-b", Arguments: args, Facts: facts})
	if err != nil || res.ExternalID != "refs/heads/agent/fix@"+recorded {
		t.Fatalf("Execute with facts: %+v, %v; want the branch at %s", res, err, recorded)
	}

	// Facts that do not decode refuse the call, sending nothing.
	if _, err := impl.Execute(ctx, tool.Call{OperationID: "op-c", Arguments: json.RawMessage(
		`{"repo":"acme/app","branch":"agent/c","from":"main"}`), Facts: json.RawMessage(`{"from_sha":1}`)}); !errors.Is(err, tool.ErrRefused) {
		t.Errorf("Execute with bad facts: %v, want %v", err, tool.ErrRefused)
	}
	if n := f.gh.Stats().BranchesCreated; n != 1 {
		t.Errorf("branches created = %d, want 1", n)
	}
}
