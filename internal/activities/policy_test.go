package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/ledger"
	"github.com/capstanhq/capstan/internal/metrics"
	"github.com/capstanhq/capstan/internal/model"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// policyDecisions is capstan_policy_decisions_total{decision,rule} as m
// holds it now.
func policyDecisions(t *testing.T, m *metrics.Metrics, decision, rule string) float64 {
	t.Helper()
	families, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "capstan_policy_decisions_total" {
			continue
		}
		for _, s := range f.GetMetric() {
			if label(s, "decision") == decision && label(s, "rule") == rule {
				return s.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// Every call the task's policy refuses is answered to the model as a tool
// error naming the rule and what is allowed, before anything is claimed or
// sent: the GitHub fake handles no request at all, and the ledger holds no
// operation. The decision comes back in the result and is counted. A call
// it allows goes on as before.
func TestExecuteToolRefusesWhatThePolicyRefusesBeforeSendingAnything(t *testing.T) {
	t.Parallel()
	m, err := metrics.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, func(d *activities.Deps) { d.Metrics = m })
	source := "rules:\n  - name: prs-need-a-person\n    tool: github_create_pull_request\n    effect: require_approval\n"
	tp := &contract.TaskPolicy{Repositories: []string{"acme/app"}, Base: "main", Tenant: "default", File: "policy.yaml", Source: source}
	for i, tc := range []struct {
		impl, args, rule, says string
	}{
		{githubtools.NameCreateBranch, `{"repo":"acme/other","branch":"capstan/x","from":"main"}`, "default/repository",
			"refused by default/repository: acme/other is outside this task's repositories: acme/app"},
		{githubtools.NamePutFile, `{"repo":"acme/app","branch":"main","path":"a.md","content":"c","message":"m"}`, "default/base-branch",
			"refused by default/base-branch: main is this task's base branch"},
		{githubtools.NamePutFile, `{"repo":"acme/app","branch":"capstan/x","path":".github/workflows/ci.yml","content":"c","message":"m"}`,
			"default/workflow-files", "refused by default/workflow-files: .github/workflows/ci.yml is under .github/, where this task never writes"},
		{githubtools.NameCreateBranch, `{"repo":"acme/app","branch":"agent/x","from":"main"}`, "default/branch-prefix",
			"refused by default/branch-prefix: branch agent/x does not start with capstan/"},
		{githubtools.NameCreatePullRequest, `{"repo":"acme/app","head":"capstan/x","base":"main","title":"t","body":"b"}`, "prs-need-a-person",
			"needs a person's approval, which this task cannot ask for"},
	} {
		in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T1", TurnID: "T1/t1", ToolCallID: "call_" + tc.rule,
			OperationID: "op-refused-" + tc.rule, Tool: tc.impl, Arguments: f.args(t, tc.args), Policy: tp}
		v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
		if err != nil {
			t.Fatalf("%d %s: %v, want a refusal the model reads", i, tc.rule, err)
		}
		var res contract.ExecuteToolResult
		_ = v.Get(&res)
		if res.State != capstan.OutcomeFailed || res.Decision == nil || !res.Decision.Refused || res.Decision.Rule != tc.rule {
			t.Errorf("%s: result = %+v (decision %+v), want FAILED, refused by %s", tc.rule, res, res.Decision, tc.rule)
		}
		data, err := f.ledger.GetItem(context.Background(), res.Item)
		if err != nil {
			t.Fatal(err)
		}
		var msg model.Message
		if err := json.Unmarshal(data, &msg); err != nil || msg.ToolCallID != in.ToolCallID || !strings.Contains(msg.Content, tc.says) ||
			!strings.Contains(msg.Content, "Nothing was sent") {
			t.Errorf("%s: tool message = %s, %v; want it to say %q", tc.rule, data, err, tc.says)
		}
		if _, err := f.ledger.Get(context.Background(), in.OperationID); !errors.Is(err, ledger.ErrNotFound) {
			t.Errorf("%s: ledger holds the refused operation (err %v); nothing should have been claimed", tc.rule, err)
		}
	}
	if s := f.sb.GitHub.Stats(); s.Requests != 0 {
		t.Errorf("GitHub handled %d requests (%+v) for five refused calls, want 0", s.Requests, s)
	}
	in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T1", TurnID: "T1/t2", ToolCallID: "call_ok", OperationID: "op-allowed",
		Tool: githubtools.NameCreateBranch, Arguments: f.args(t, `{"repo":"Acme/App","branch":"capstan/x","from":"main"}`), Policy: tp}
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatal(err)
	}
	var res contract.ExecuteToolResult
	_ = v.Get(&res)
	if res.State != capstan.OutcomeSucceeded || res.Decision == nil || res.Decision.Refused || res.Decision.Rule != "default/allow" {
		t.Errorf("allowed call: %+v (decision %+v), want SUCCEEDED by default/allow", res, res.Decision)
	}
	if n := f.sb.GitHub.Stats().BranchesCreated; n != 1 {
		t.Errorf("branches created = %d, want 1", n)
	}
	for _, c := range []struct {
		decision, rule string
		n              float64
	}{{"deny", "default/repository", 1}, {"deny", "default/base-branch", 1}, {"deny", "default/workflow-files", 1},
		{"deny", "default/branch-prefix", 1}, {"require_approval", "prs-need-a-person", 1}, {"allow", "default/allow", 1}} {
		if got := policyDecisions(t, m, c.decision, c.rule); got != c.n {
			t.Errorf("capstan_policy_decisions_total{decision=%q,rule=%q} = %v, want %v", c.decision, c.rule, got, c.n)
		}
	}
}

// A task started without a policy context (before the policy was wired
// into tool calls) is not decided: its call goes out as it did.
func TestExecuteToolWithoutPolicyContextIsNotDecided(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	in := contract.ExecuteToolInput{Tenant: "default", TaskID: "T1", TurnID: "T1/t1", ToolCallID: "call_1", OperationID: "op-old",
		Tool: githubtools.NameCreateBranch, Arguments: f.args(t, `{"repo":"acme/other","branch":"agent/x","from":"main"}`)}
	v, err := f.env.ExecuteActivity(f.acts.ExecuteTool, in)
	if err != nil {
		t.Fatal(err)
	}
	var res contract.ExecuteToolResult
	_ = v.Get(&res)
	if res.State != capstan.OutcomeSucceeded || res.Decision != nil {
		t.Errorf("result = %+v, want SUCCEEDED with no decision", res)
	}
}

// A tool the task's policy refuses whatever its arguments (a file rule
// denying the class unsafe, here github_comment) is not offered to the
// model; every other tool is, and with no file every tool is.
func TestModelTurnDoesNotOfferToolsThePolicyAlwaysRefuses(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	seed := []model.Message{{Role: model.RoleSystem, Content: "You are a test.\nTask id: T"}, {Role: model.RoleUser, Content: "go"}}
	offered := func(id string, tp *contract.TaskPolicy) []string {
		t.Helper()
		in := contract.ModelTurnInput{TaskID: "T" + id, TurnID: "T" + id + "/t1", AttemptID: "T" + id + "/t1/a1", Model: "sandbox:demo", Seed: seed, Policy: tp}
		if _, err := f.env.ExecuteActivity(f.acts.ModelTurn, in); err != nil {
			t.Fatal(err)
		}
		var sent struct {
			Tools []struct{ Function struct{ Name string } }
		}
		if err := json.Unmarshal(f.sb.Model.LastRequest(), &sent); err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, impl := range sent.Tools {
			names = append(names, impl.Function.Name)
		}
		return names
	}
	tp := &contract.TaskPolicy{Repositories: []string{"capstan-sandbox/demo"}, Base: "main",
		Source: "rules:\n  - name: no-unsafe\n    class: unsafe\n    effect: deny\n    reason: this task posts no comments\n"}
	got := strings.Join(offered("1", tp), ",")
	if strings.Contains(got, githubtools.NameComment) || !strings.Contains(got, githubtools.NameCreateBranch) {
		t.Errorf("offered %s; want every tool but %s", got, githubtools.NameComment)
	}
	tp.Source = ""
	if got := strings.Join(offered("2", tp), ","); !strings.Contains(got, githubtools.NameComment) {
		t.Errorf("with the defaults alone, offered %s; want %s too", got, githubtools.NameComment)
	}
}
