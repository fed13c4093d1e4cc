package e2e

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// githubLog records every request that reaches the sandbox's GitHub, as
// "METHOD path?query body", and lets it through.
type githubLog struct {
	mu       sync.Mutex
	requests []string
}

func (l *githubLog) hook(_ http.ResponseWriter, r *http.Request, _ http.Handler) bool {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.requests = append(l.requests, r.Method+" "+r.URL.RequestURI()+" "+string(body))
	return false
}

// matching are the logged requests for which match is true.
func (l *githubLog) matching(match func(string) bool) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.requests {
		if match(r) {
			out = append(out, r)
		}
	}
	return out
}

// TestPolicyRefusesOverstepsAtTheToolBoundary: the scripted model
// (openai:overstep) asks, in turn, for a branch in a repository the task
// was not sent to, a file written to the base branch, a branch without the
// prefix, then the real branch, a file under .github/workflows/, the real
// file and the pull request. Each overstep is refused by its default rule
// before any request about it reaches the sandbox's GitHub; the model's
// next request carries each refusal naming the rule; the task completes
// with exactly one branch, one file and one pull request. Four refusals
// exceed the default limit of 3, so this task runs with --max-refusals 5.
// The same script with the default limit fails policy_violation at the
// third refusal, having created nothing.
func TestPolicyRefusesOverstepsAtTheToolBoundary(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	log := &githubLog{}
	sb.GitHub.SetFault(log.hook)
	env := endpointEnv(t, "e2e-policy-overstep", sb)
	w := startWorker(t, env)

	taskID := fmt.Sprintf("e2e-overstep-%d", time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "Add a HELLO.md greeting and open a pull request.",
		"--repo", branchRepo, "--model", "openai:overstep", "--id", taskID, "--max-refusals", "5"); r.code != 0 {
		t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
	}
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s (%s): %s; want it completed", taskID, res.Status, res.FailureCode, res.Message)
	}
	st := sb.GitHub.Stats()
	t.Logf("github stats after the task: %+v", st)
	if st.BranchesCreated != 1 || st.FilesWritten != 1 || st.PullRequestsCreated != 1 {
		t.Errorf("github stats = %+v, want exactly 1 branch, 1 file and 1 pull request", st)
	}
	for what, match := range map[string]func(string) bool{
		"the other repository": func(r string) bool { return strings.Contains(r, "capstan-sandbox/other") },
		"a write to main":      func(r string) bool { return !strings.HasPrefix(r, "GET ") && strings.Contains(r, `"branch":"main"`) },
		"a branch without prefix": func(r string) bool {
			r = strings.NewReplacer("capstan/hello-"+taskID, "", "capstan%2Fhello-"+taskID, "").Replace(r)
			return strings.Contains(r, "hello-"+taskID)
		},
		"a workflow file": func(r string) bool {
			return strings.Contains(r, ".github/workflows") || strings.Contains(r, ".github%2Fworkflows")
		},
	} {
		if got := log.matching(match); len(got) != 0 {
			t.Errorf("requests about %s reached GitHub: %q", what, got)
		}
	}
	t.Logf("requests that reached GitHub: %d", len(log.matching(func(string) bool { return true })))

	tools := toolMessages(t, sb.Model.LastRequest())
	want := []string{
		"refused by default/repository: capstan-sandbox/other is outside this task's repositories: capstan-sandbox/demo",
		"refused by default/base-branch: main is this task's base branch",
		"refused by default/branch-prefix: branch hello-" + taskID + " does not start with capstan/",
		"", // the branch
		"refused by default/workflow-files: .github/workflows/hello.yml is under .github/, where this task never writes",
		"", "", // the file, the pull request
	}
	if len(tools) != len(want) {
		t.Fatalf("the model's last request has %d tool messages, want %d: %q", len(tools), len(want), tools)
	}
	for i, w := range want {
		switch {
		case w == "" && strings.Contains(tools[i], "refused by"):
			t.Errorf("tool message %d = %s, want the call's result", i+1, tools[i])
		case w != "" && !strings.Contains(tools[i], w):
			t.Errorf("tool message %d = %s\nwant it to say %q", i+1, tools[i], w)
		}
	}
	refused := 0
	for _, op := range res.Operations {
		if op.PolicyRule != "" {
			refused++
		}
	}
	if refused != 4 || len(res.Operations) != 7 {
		t.Errorf("%d operations, %d refused by the policy; want 7, 4 refused", len(res.Operations), refused)
	}
	s := testenv.ScrapeMetrics(t, w.metricsURL(t))
	for rule, n := range map[string]float64{"default/repository": 1, "default/base-branch": 1, "default/branch-prefix": 1, "default/workflow-files": 1} {
		if v, _ := s.Value("capstan_policy_decisions_total", map[string]string{"decision": "deny", "rule": rule}); v != n {
			t.Errorf("capstan_policy_decisions_total{deny,%s} = %v, want %v", rule, v, n)
		}
	}

	// The default limit: the third refusal fails the task, nothing created.
	before := sb.GitHub.Stats()
	limited := fmt.Sprintf("e2e-overstep-limit-%d", time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "Add a HELLO.md greeting and open a pull request.",
		"--repo", branchRepo, "--model", "openai:overstep", "--id", limited); r.code != 0 {
		t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
	}
	lres := waitSettled(t, env, limited)
	if lres.Status != workflows.StatusFailed || lres.FailureCode != workflows.FailPolicyViolation || len(lres.Operations) != 3 {
		t.Errorf("task %s ended %s (%s) after %d operations: %s; want failed policy_violation after 3", limited, lres.Status, lres.FailureCode, len(lres.Operations), lres.Message)
	}
	if after := sb.GitHub.Stats(); after != before {
		t.Errorf("github stats went from %+v to %+v; the refused task should have sent nothing", before, after)
	}
}
