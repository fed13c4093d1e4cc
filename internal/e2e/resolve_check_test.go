package e2e

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// startPersonTask starts a task whose pull request's answer is lost and
// whose reconciler cannot ask, so that a person must resolve it; it returns
// the environment, the task id, the operation that waits and the URL of
// the one pull request the lost answer opened.
func startPersonTask(t *testing.T, name string, extraEnv ...string) (env []string, sb *sandbox.Sandbox, taskID, opID, url string) {
	t.Helper()
	sb = startSandbox(t)
	for _, rule := range []sandbox.FaultRule{
		{Endpoint: "pulls/create", Kind: sandbox.FaultDrop, Times: 1},
		{Endpoint: "pulls/list", Kind: sandbox.FaultFail}, // every time: the reconciler cannot ask
	} {
		if err := sb.GitHub.AddFault(rule); err != nil {
			t.Fatal(err)
		}
	}
	env = append(append(endpointEnv(t, name, sb), "CAPSTAN_RECONCILE_WINDOW=2s"), extraEnv...)
	startWorker(t, env)
	taskID = fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "Add a HELLO.md greeting and open a pull request.",
		"--repo", "capstan-sandbox/demo", "--model", "openai:demo", "--id", taskID); r.code != 0 {
		t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
	}
	opID = waitNeedsHuman(t, env, taskID)
	prs := sb.GitHub.PullRequests("capstan-sandbox/demo")
	if len(prs) != 1 {
		t.Fatalf("pull requests = %d, want the 1 whose answer was lost", len(prs))
	}
	url = fmt.Sprintf("%s/capstan-sandbox/demo/pull/%d", strings.TrimRight(sb.GitHubURL, "/"), prs[0].Number)
	return env, sb, taskID, opID, url
}

// operationRecord is the task's record of operation opID.
func operationRecord(t *testing.T, res workflows.TaskResult, opID string) workflows.OperationRecord {
	t.Helper()
	for _, op := range res.Operations {
		if op.OperationID == opID {
			return op
		}
	}
	t.Fatalf("task has no operation %s: %+v", opID, res.Operations)
	return workflows.OperationRecord{}
}

// Two people resolve the same operation at once (issue 14, item 8): one
// resolution is recorded, the other is refused with who resolved it, and so
// is a third that comes afterwards; the winner's name is in the result and
// the journal.
func TestSecondResolverIsToldWhoResolved(t *testing.T) {
	t.Parallel()
	env, sb, taskID, opID, url := startPersonTask(t, "e2e-two-resolvers", "CAPSTAN_MODEL_FIRST_EVENT_TIMEOUT=5s")
	// The model's next answer is held until the worker gives up on it
	// (5 s) and asks again, so that the task is still running when a third
	// person comes after the resolution.
	if err := sb.Model.AddFault(sandbox.FaultRule{Endpoint: "chat/completions", Kind: sandbox.FaultHoldHeaders, Times: 1}); err != nil {
		t.Fatal(err)
	}

	people := []string{"alice", "bob"}
	got := make([]result, len(people))
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, who := range people {
		wg.Go(func() {
			<-start
			got[i] = runStarter(t, env, "resolve", taskID, opID, "--found", url, "--as", who)
		})
	}
	close(start)
	wg.Wait()

	winner, loser := -1, -1
	for i, r := range got {
		switch {
		case r.code == 0 && strings.Contains(r.stdout, "resolved as found"):
			winner = i
		case r.code == 2:
			loser = i
		}
	}
	if winner < 0 || loser < 0 {
		t.Fatalf("two resolves at once: %s exit %d (%q, %q), %s exit %d (%q, %q); want one recorded and the other refused",
			people[0], got[0].code, got[0].stdout, got[0].stderr, people[1], got[1].code, got[1].stdout, got[1].stderr)
	}
	want := "already resolved by " + people[winner]
	if !strings.Contains(got[loser].stderr, want) {
		t.Errorf("the second resolver (%s) was told %q, want it to say %q", people[loser], got[loser].stderr, want)
	}
	// Later, too, the answer names who resolved it; nothing is overwritten.
	if r := runStarter(t, env, "resolve", taskID, opID, "--absent", "--as", "carol"); r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Errorf("a later resolve --absent: exit %d, stderr %q; want exit 2 saying %q", r.code, r.stderr, want)
	}

	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s: %s %s %s", taskID, res.Status, res.FailureCode, res.Message)
	}
	op := operationRecord(t, res, opID)
	if op.State != capstan.OutcomeSucceeded || op.ExternalID != url || op.ResolvedBy != people[winner] {
		t.Errorf("operation = %+v, want SUCCEEDED at %s, resolved by %s", op, url, people[winner])
	}
	journal := strings.Join(queryJournal(t, taskID), "\n")
	if !strings.Contains(journal, "resolved by "+people[winner]+": found "+url) {
		t.Errorf("journal:\n%s\nwant the resolution by %s", journal, people[winner])
	}
}

// A person's --found URL is read back through the tool's lookup on a
// worker before it is accepted (issue 14, item 9): a URL that is not a
// pull request, not in the task's repository, or names no pull request is
// refused, and so is any URL while GitHub cannot be asked; each refusal
// leaves the task waiting for the same operation, and the right URL then
// completes it.
func TestPersonFoundIsReadBack(t *testing.T) {
	t.Parallel()
	env, sb, taskID, opID, url := startPersonTask(t, "e2e-found-checked")
	web := strings.TrimRight(sb.GitHubURL, "/")

	for _, tc := range []struct{ url, want string }{
		{web + "/capstan-sandbox/demo/pull/999", "#999"},
		{web + "/capstan-sandbox/demo/issues/1#issuecomment-1", "not a pull request"},
		{web + "/someone/else/pull/1", "not in capstan-sandbox/demo"},
		{"https://example.com/whatever", "not a pull request"},
	} {
		r := runStarter(t, env, "resolve", taskID, opID, "--found", tc.url)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("resolve --found %s: exit %d, stdout %q, stderr %q; want exit 2 saying %q", tc.url, r.code, r.stdout, r.stderr, tc.want)
		}
		if got := waitNeedsHuman(t, env, taskID); got != opID {
			t.Fatalf("after a refused --found the task waits for %s, want still %s", got, opID)
		}
	}

	// GitHub cannot be asked: nothing is accepted, and the person is told.
	if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "pulls/get", Kind: sandbox.FaultFail}); err != nil {
		t.Fatal(err)
	}
	if r := runStarter(t, env, "resolve", taskID, opID, "--found", url); r.code != 2 || !strings.Contains(r.stderr, "could not read") {
		t.Errorf("resolve --found while GitHub fails: exit %d, stdout %q, stderr %q; want exit 2 saying it could not read it back", r.code, r.stdout, r.stderr)
	}
	if got := waitNeedsHuman(t, env, taskID); got != opID {
		t.Fatalf("after a --found that could not be checked the task waits for %s, want still %s", got, opID)
	}
	sb.GitHub.ClearFaults()
	if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "pulls/list", Kind: sandbox.FaultFail}); err != nil {
		t.Fatal(err)
	}

	if r := runStarter(t, env, "resolve", taskID, opID, "--found", url); r.code != 0 || !strings.Contains(r.stdout, "resolved as found") {
		t.Fatalf("resolve --found %s: exit %d, stdout %q, stderr %q", url, r.code, r.stdout, r.stderr)
	}
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s: %s %s %s", taskID, res.Status, res.FailureCode, res.Message)
	}
	if op := operationRecord(t, res, opID); op.State != capstan.OutcomeSucceeded || op.ExternalID != url {
		t.Errorf("operation = %+v, want SUCCEEDED at %s", op, url)
	}
	if st := sb.GitHub.Stats(); st.PullRequestsCreated != 1 {
		t.Errorf("pull requests created = %d, want 1", st.PullRequestsCreated)
	}
}
