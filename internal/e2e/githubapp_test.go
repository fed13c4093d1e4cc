package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/sandbox"
	"github.com/capstanhq/capstan/internal/workflows"
)

// appTokenLifetime is how long the sandbox's installation tokens live.
const appTokenLifetime = 30 * time.Second

// TestLongGitHubAppTokensOutliveNoTask: the worker acts as a GitHub App (id and
// PEM key in its environment, its installation looked up from the
// repository) against the sandbox GitHub, which checks the App's JWTs and
// issues installation tokens living 30 s. The task writes its branch and
// file, then its pull request waits for approval until every token issued
// so far has expired; approved, the pull request is sent with a fresh
// token, and its answer is lost, so the reconciler must find it by its
// marker — which it believes only as written by the App's bot. The task
// completes with exactly one branch, one file and one pull request, by
// the bot; no request met an expired token; and no token is in the
// workflow's history, the ledger or the worker's output.
// It waits out the tokens' 30 s lifetime: a long run, in `make test-long`;
// TestGitHubAppWrongKeyStopsTheWorker keeps the App's start-up checks in
// `make test`.
func TestLongGitHubAppTokensOutliveNoTask(t *testing.T) {
	requireLong(t)
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}))
	sb := startSandbox(t)
	sb.GitHub.SetApp(sandbox.GitHubApp{ID: 4242, Slug: "capstan-e2e", PublicKey: &key.PublicKey, InstallationID: 99,
		TokenLifetime: appTokenLifetime})
	log := &githubLog{}
	sb.GitHub.SetFault(log.hook)
	env := append(baseEnv(t, "e2e-ghapp"),
		"OPENAI_BASE_URL="+sb.ModelURL, "OPENAI_API_KEY="+openAIKey,
		"GITHUB_API_URL="+sb.GitHubURL, "CAPSTAN_GITHUB_APP_ID=4242", "CAPSTAN_GITHUB_APP_PRIVATE_KEY="+keyPEM,
		"SLACK_API_URL="+sb.SlackURL, "SLACK_BOT_TOKEN="+slackToken,
		"CAPSTAN_RECONCILE_WINDOW=5s")
	w := startWorker(t, env)

	taskID, op := startApprovalTask(t, env, "ghapp")
	if err := sb.GitHub.AddFault(sandbox.FaultRule{Endpoint: "pulls/create", Kind: sandbox.FaultDrop, Times: 1}); err != nil {
		t.Fatal(err)
	}
	// Wait until every token issued so far has expired at the sandbox.
	var last time.Time
	for _, exp := range sb.GitHub.AppTokens() {
		if exp.After(last) {
			last = exp
		}
	}
	if last.IsZero() {
		t.Fatal("the worker wrote the branch and file without an installation token")
	}
	<-time.After(time.Until(last) + time.Second)
	issuedBefore := sb.GitHub.Stats().AppTokensIssued

	if r := runStarter(t, env, "approve", taskID, op.OperationID, "--hash", op.CallHash); r.code != 0 {
		t.Fatalf("approve: exit %d, stderr %q", r.code, r.stderr)
	}
	res := waitResult(t, taskID)
	if res.Status != workflows.StatusCompleted {
		t.Fatalf("task %s ended %s (%s): %s", taskID, res.Status, res.FailureCode, res.Message)
	}
	st := sb.GitHub.Stats()
	if st.BranchesCreated != 1 || st.FilesWritten != 1 || st.PullRequestsCreated != 1 || len(pullRequestPosts(log)) != 1 {
		t.Errorf("github stats = %+v, pull-request posts %d; want exactly 1 branch, 1 file, 1 pull request", st, len(pullRequestPosts(log)))
	}
	if st.AppTokensIssued <= issuedBefore || st.RefusedTokens != 0 {
		t.Errorf("tokens issued %d (%d before the approval), refused %d; want a new token after the old ones expired, and none refused",
			st.AppTokensIssued, issuedBefore, st.RefusedTokens)
	}
	prs := sb.GitHub.PullRequests(branchRepo)
	if len(prs) != 1 || prs[0].Author != "capstan-e2e[bot]" {
		t.Errorf("pull requests = %+v, want one by capstan-e2e[bot]", prs)
	}
	for _, o := range res.Operations {
		if o.OperationID == op.OperationID && (o.State != capstan.OutcomeSucceeded || !o.Recovered) {
			t.Errorf("the pull request's operation = %+v, want succeeded, recovered by its reconciler from the bot's marker", o)
		}
	}

	var history strings.Builder
	for _, ev := range fetchHistory(t, workflows.WorkflowID(taskID)).GetEvents() {
		b, err := protojson.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		history.Write(b)
	}
	tokens := sb.GitHub.AppTokens()
	t.Logf("%d installation tokens issued, each living %s; history %d bytes", len(tokens), appTokenLifetime, history.Len())
	for tok := range tokens {
		if strings.Contains(history.String(), tok) || strings.Contains(w.logs(), tok) {
			t.Errorf("installation token %s… is in the workflow's history or the worker's output", tok[:8])
		}
	}
	if strings.Contains(history.String(), "ghs_") || strings.Contains(history.String(), "PRIVATE KEY") {
		t.Error("the workflow's history holds an installation token or the App's key")
	}
	// Nor is one in the ledger's file (with its write-ahead log).
	ledgerRead := false
	for _, kv := range env {
		if dsn, ok := strings.CutPrefix(kv, "CAPSTAN_LEDGER_DSN=sqlite://"); ok {
			for _, f := range []string{dsn, dsn + "-wal"} {
				b, err := os.ReadFile(f)
				ledgerRead = ledgerRead || (err == nil && len(b) > 0)
				if bytes.Contains(b, []byte("ghs_")) {
					t.Errorf("the ledger's %s holds an installation token", f)
				}
			}
		}
	}
	if !ledgerRead {
		t.Error("the ledger's file was not found to search")
	}
}

// TestGitHubAppWrongKeyStopsTheWorker: a worker whose App key is not the
// App's (the sandbox refuses its JWT), or whose GITHUB_TOKEN is set beside
// the App, stops at startup with one line saying which settings to check.
func TestGitHubAppWrongKeyStopsTheWorker(t *testing.T) {
	t.Parallel()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	other, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	sb := startSandbox(t)
	sb.GitHub.SetApp(sandbox.GitHubApp{ID: 4242, Slug: "capstan-e2e", PublicKey: &key.PublicKey, InstallationID: 99})
	otherPEM := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(other)}))
	for _, tc := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"wrong key", nil, "check CAPSTAN_GITHUB_APP_ID and its private key"},
		{"token too", []string{"GITHUB_TOKEN=" + githubTok}, "GITHUB_TOKEN and CAPSTAN_GITHUB_APP_* are both set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append(baseEnv(t, "e2e-ghapp-key"), "OPENAI_API_KEY="+openAIKey, "GITHUB_API_URL="+sb.GitHubURL,
				"CAPSTAN_GITHUB_APP_ID=4242", "CAPSTAN_GITHUB_APP_PRIVATE_KEY="+otherPEM)
			r := runWorkerToExit(t, append(env, tc.extra...))
			last := strings.TrimSpace(lastLines(r.stderr))
			if r.code != 1 || !strings.Contains(last, tc.want) || strings.Count(last, "\n") != 0 {
				t.Fatalf("exit %d, stderr %q; want exit 1 and one line with %q", r.code, r.stderr, tc.want)
			}
			t.Logf("worker: %s", last)
			if strings.Contains(r.stderr, "PRIVATE KEY") {
				t.Errorf("the worker printed its key: %q", r.stderr)
			}
		})
	}
}
