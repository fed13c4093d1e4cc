package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/capstanhq/capstan/internal/ledger/sqlite"
	"github.com/capstanhq/capstan/internal/workflows"
)

// prodFrozen is a policy file whose one rule's CEL condition reads the
// task's labels and the call's path.
const prodFrozen = `rules:
  - name: prod-markdown-frozen
    tool: github_put_file
    when: labels[?"env"].orValue("") == "prod" && path.endsWith(".md")
    effect: deny
    reason: Markdown files are frozen in prod
`

// TestPolicyFileCELRuleDecidesACall: with CAPSTAN_POLICY naming a file
// whose CEL rule refuses Markdown writes for tasks labelled env=prod, the
// demo script's task started with --label env=prod has its file write
// refused by that rule's name before anything reaches the sandbox's GitHub
// (no file written), the model's next request carries the refusal, and
// the ledger records the decision; the same task without the label writes
// its file.
func TestPolicyFileCELRuleDecidesACall(t *testing.T) {
	t.Parallel()
	sb := startSandbox(t)
	file := filepath.Join(t.TempDir(), "policy.yaml")
	text := paddedPolicy(prodFrozen, 2000)
	if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	noFileEnv := endpointEnv(t, "e2e-policy-cel", sb)
	env := append(slices.Clone(noFileEnv), "CAPSTAN_POLICY="+file)
	startWorker(t, env)

	prod := fmt.Sprintf("e2e-cel-prod-%d", time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "Add a HELLO.md greeting and open a pull request.",
		"--repo", branchRepo, "--model", "openai:demo", "--id", prod, "--label", "env=prod"); r.code != 0 {
		t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
	}
	res := waitResult(t, prod)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s (%s): %s; want it completed", prod, res.Status, res.FailureCode, res.Message)
	}
	st := sb.GitHub.Stats()
	if st.FilesWritten != 0 || st.BranchesCreated != 1 {
		t.Errorf("github stats after the prod task = %+v, want its branch and no file", st)
	}
	tools := toolMessages(t, sb.Model.LastRequest())
	want := "refused by prod-markdown-frozen: Markdown files are frozen in prod"
	if len(tools) < 2 || !strings.Contains(tools[1], want) {
		t.Errorf("the model's last request's tool messages = %q; want the second to say %q", tools, want)
	}
	refused := 0
	for _, op := range res.Operations {
		if op.PolicyRule == "prod-markdown-frozen" {
			refused++
		}
	}
	if refused != 1 {
		t.Errorf("%d operations refused by prod-markdown-frozen, want 1: %+v", refused, res.Operations)
	}
	checkRecordedDecision(t, env, prod, "prod-markdown-frozen")

	dev := fmt.Sprintf("e2e-cel-dev-%d", time.Now().UnixNano())
	if r := runStarter(t, env, "run", "--prompt", "Add a HELLO.md greeting and open a pull request.",
		"--repo", branchRepo, "--model", "openai:demo", "--id", dev); r.code != 0 {
		t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
	}
	if res := waitResult(t, dev); res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s (%s): %s; want it completed", dev, res.Status, res.FailureCode, res.Message)
	}
	if after := sb.GitHub.Stats(); after.FilesWritten != 1 || after.PullRequestsCreated < 1 {
		t.Errorf("github stats after the task without the label = %+v, want its file written and its pull request", after)
	}

	// The policy file's text is in history twice (the start input, the
	// first turn's ModelTurn input), not once per call: the same task
	// started without a file has a history shorter by about that.
	none := fmt.Sprintf("e2e-cel-nof-%d", time.Now().UnixNano())
	if r := runStarter(t, noFileEnv, "run", "--prompt", "Add a HELLO.md greeting and open a pull request.",
		"--repo", branchRepo, "--model", "openai:demo", "--id", none); r.code != 0 {
		t.Fatalf("start: exit %d, stderr %s", r.code, r.stderr)
	}
	if res := waitResult(t, none); res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s (%s): %s; want it completed", none, res.Status, res.FailureCode, res.Message)
	}
	withFile, without := historyBytes(t, dev), historyBytes(t, none)
	calls := 0
	for _, ev := range fetchHistory(t, workflows.WorkflowID(dev)).GetEvents() {
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && (a.GetActivityType().GetName() == "ModelTurn" || a.GetActivityType().GetName() == "ExecuteTool") {
			calls++
		}
	}
	t.Logf("history of the demo task: %d bytes with a %d-byte policy file (%d ModelTurn and ExecuteTool inputs), %d without; "+
		"the file costs %d bytes (the text in every input would cost about %d)", withFile, len(text), calls, without, withFile-without, (calls+1)*len(text))
	if d := withFile - without; d > 4*len(text) {
		t.Errorf("a %d-byte policy file adds %d bytes to the history, want at most %d (the text twice, escaped, and its references)", len(text), d, 4*len(text))
	}
}

// paddedPolicy is policy followed by rules that match nothing (a label no
// task has) up to at least size bytes.
func paddedPolicy(policy string, size int) string {
	var b strings.Builder
	b.WriteString(policy)
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "  - name: padding-%02d\n    tool: github_comment\n    when: labels[?\"team\"].orValue(\"\") == \"t%02d\"\n    effect: deny\n    reason: padding\n", i, i)
	}
	return b.String()
}

// historyBytes is proto.Size of every event of the task's latest run.
func historyBytes(t *testing.T, taskID string) int {
	t.Helper()
	n := 0
	for _, ev := range fetchHistory(t, workflows.WorkflowID(taskID)).GetEvents() {
		n += proto.Size(ev)
	}
	return n
}

// checkRecordedDecision opens the test's ledger and checks that task has
// one refused decision, by rule.
func checkRecordedDecision(t *testing.T, env []string, task, rule string) {
	t.Helper()
	var path string
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "CAPSTAN_LEDGER_DSN=sqlite://"); ok {
			path = p
		}
	}
	st, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ds, err := st.Decisions(context.Background(), task)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, d := range ds {
		if d.Refused && d.Rule == rule {
			n++
		}
	}
	if n != 1 || len(ds) < 3 {
		t.Errorf("ledger decisions of %s = %+v; want one refused by %s among its calls' decisions", task, ds, rule)
	}
}

// TestMalformedPolicyFileIsRefusedWithItsLine: a CAPSTAN_POLICY whose
// third rule's CEL does not compile is refused by `starter run` (exit 2,
// one sentence naming the file, the line and the rule, no task started)
// and stops a worker at start with the same sentence.
func TestMalformedPolicyFileIsRefusedWithItsLine(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "policy.yaml")
	bad := prodFrozen + `  - name: also-fine
    tool: github_comment
    effect: allow
  - name: broken-cel
    when: labels["env"] ==
    effect: allow
`
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	sb := startSandbox(t)
	env := append(endpointEnv(t, "e2e-policy-bad", sb), "CAPSTAN_POLICY="+file)
	sentence := fmt.Sprintf("policy file %s, line 11, rule \"broken-cel\"", file)

	id := fmt.Sprintf("e2e-bad-policy-%d", time.Now().UnixNano())
	r := runStarter(t, env, "run", "--prompt", "p", "--repo", branchRepo, "--model", "openai:demo", "--id", id)
	if r.code != 2 || !strings.Contains(r.stderr, sentence) {
		t.Errorf("starter run: exit %d, stderr %q; want 2 and %q", r.code, r.stderr, sentence)
	}
	if st := runStarter(t, env, "status", id, "--json"); st.code == 0 {
		t.Errorf("starter status %s after the refused run: exit 0 (%s); want no such task", id, st.stdout)
	}

	w := runWorkerToExit(t, env)
	if w.code == 0 || !strings.Contains(w.stderr, "CAPSTAN_POLICY: "+sentence) {
		t.Errorf("worker: exit %d, stderr %q; want it to stop naming %q", w.code, w.stderr, sentence)
	}
}
