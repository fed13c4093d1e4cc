package workflows_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/workflows"
)

// upserts records every search-attribute upsert of the task env runs, each
// as "Name=value" pairs sorted by name.
func upserts(env *testsuite.TestWorkflowEnvironment) func() [][]string {
	var mu sync.Mutex
	var got [][]string
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa := args.Get(0).(temporal.SearchAttributes)
		var one []string
		for k, v := range sa.GetUntypedValues() {
			one = append(one, fmt.Sprintf("%s=%v", k.GetName(), v))
		}
		slices.Sort(one)
		mu.Lock()
		got = append(got, one)
		mu.Unlock()
	}).Return(nil)
	return func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(got)
	}
}

// named keeps, of each upsert, the pairs of the attributes names, dropping
// upserts that set none of them.
func named(all [][]string, names ...string) []string {
	var out []string
	for _, one := range all {
		var kept []string
		for _, kv := range one {
			if slices.Contains(names, kv[:strings.IndexByte(kv, '=')]) {
				kept = append(kept, kv)
			}
		}
		if len(kept) > 0 {
			out = append(out, strings.Join(kept, " "))
		}
	}
	return out
}

var flagNames = []string{"CapstanFlags", "CapstanNeedsHuman", "CapstanAwaitingApproval", "CapstanDeadLetter"}

// A task that asks a person says so in CapstanFlags (needs_human) and
// clears it once resolved, never touching the Bools; a run that started
// before changeSearchFlags (no marker where it first asks) sets and clears
// CapstanNeedsHuman as it did.
func TestNeedsHumanIsAFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		version workflow.Version
		want    []string
	}{
		{"since search-flags", 1, []string{"CapstanFlags=[needs_human]", "CapstanFlags=[]"}},
		{"before search-flags", workflow.DefaultVersion, []string{"CapstanNeedsHuman=true", "CapstanNeedsHuman=false", "CapstanNeedsHuman=false"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env, _ := personEnv(t, nil)
			env.OnGetVersion("search-flags", workflow.DefaultVersion, 1).Return(c.version)
			got := upserts(env)
			var okErr error = errors.New("never answered")
			resolveAt(env, 2*time.Hour, workflows.ResolveRequest{OperationID: prOpID, Decision: "found", URL: "https://github.com/acme/app/pull/7"}, &okErr)
			env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m"})
			if okErr != nil {
				t.Fatalf("resolve: %v", okErr)
			}
			var res workflows.TaskResult
			if err := env.GetWorkflowResult(&res); err != nil || res.Status != workflows.StatusCompleted {
				t.Fatalf("result %+v, %v; want completed", res, err)
			}
			if flags := named(got(), flagNames...); !slices.Equal(flags, c.want) {
				t.Errorf("flag upserts = %q, want %q (all %q)", flags, c.want, got())
			}
		})
	}
}

// A task that waits for an approval says so in CapstanFlags
// (awaiting_approval) and clears it once answered; before
// changeSearchFlags, CapstanAwaitingApproval as it did.
func TestAwaitingApprovalIsAFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		version workflow.Version
		want    []string
	}{
		{"since search-flags", 1, []string{"CapstanFlags=[awaiting_approval]", "CapstanFlags=[]"}},
		{"before search-flags", workflow.DefaultVersion, []string{"CapstanAwaitingApproval=true", "CapstanAwaitingApproval=false", "CapstanAwaitingApproval=false"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env, _ := approvalTask(t, 1)
			env.OnGetVersion("search-flags", workflow.DefaultVersion, 1).Return(c.version)
			got := upserts(env)
			var okErr error
			answerAt(env, 2*time.Hour, workflows.UpdateApprove, workflows.ApprovalRequest{OperationID: prOpID, By: "alice", Hash: prHash}, &okErr)
			env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", Repo: "acme/app"})
			if okErr != nil {
				t.Fatalf("approve: %v", okErr)
			}
			var res workflows.TaskResult
			if err := env.GetWorkflowResult(&res); err != nil || res.Status != workflows.StatusCompleted {
				t.Fatalf("result %+v, %v; want completed", res, err)
			}
			if flags := named(got(), flagNames...); !slices.Equal(flags, c.want) {
				t.Errorf("flag upserts = %q, want %q (all %q)", flags, c.want, got())
			}
		})
	}
}

// A task whose person never answers ends with needs_human cleared and
// the task's status failed in the same upsert.
func TestTimedOutTaskClearsItsFlag(t *testing.T) {
	t.Parallel()
	env, _ := personEnv(t, nil)
	got := upserts(env)
	env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m"})
	all := got()
	if flags := named(all, flagNames...); !slices.Equal(flags, []string{"CapstanFlags=[needs_human]", "CapstanFlags=[]"}) {
		t.Errorf("flag upserts = %q, want needs_human set, then unset as the task ends", flags)
	}
	if last := strings.Join(all[len(all)-1], " "); !strings.Contains(last, "CapstanFlags=[]") || !strings.Contains(last, "CapstanStatus=failed") {
		t.Errorf("last upsert = %q, want the flag cleared with the status failed", last)
	}
}

// The start a starter of this version makes — StartAttributes, no
// CapstanNeedsHuman — holds: the run upserts nothing as it starts. So does
// one of the starter before, which set CapstanNeedsHuman = false.
func TestStartWithoutTheBoolHolds(t *testing.T) {
	t.Parallel()
	in := workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Logic: workflows.CurrentLogic, Prompt: "p", Model: "openai:m", Repo: "acme/app"}
	for _, c := range []struct {
		name  string
		attrs []temporal.SearchAttributeUpdate
	}{
		{"this starter", workflows.StartAttributes(in)},
		{"the starter before", append(workflows.StartAttributes(in), workflows.AttrNeedsHuman.ValueSet(false))},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			env.RegisterActivity(&activities.Activities{})
			callsThenAnswers(prCall)(env)
			env.OnActivity(a.ExecuteTool, mock.Anything, mock.Anything).Return(
				contract.ExecuteToolResult{OperationID: prOpID, State: capstan.OutcomeSucceeded, ExternalID: "https://github.com/acme/app/pull/8", Item: "sha256:20"}, nil)
			if err := env.SetTypedSearchAttributesOnStart(temporal.NewSearchAttributes(c.attrs...)); err != nil {
				t.Fatal(err)
			}
			got := upserts(env)
			env.ExecuteWorkflow(workflows.AgentTask, in)
			if err := env.GetWorkflowError(); err != nil {
				t.Fatal(err)
			}
			all := got()
			if len(all) == 0 || slices.Contains(all[0], "CapstanStatus=running") {
				t.Errorf("upserts = %q; want none of the start attributes upserted again", all)
			}
			if flags := named(all, flagNames...); len(flags) != 0 {
				t.Errorf("flag upserts = %q, want none for a task that asked nobody", flags)
			}
		})
	}
}

// sqlVisibilityLimits are the custom search attributes of each type a
// namespace may define on SQL visibility (PostgreSQL, MySQL, SQLite) at
// go.temporal.io/server v1.32.1: sadefs.defaultNumDBCustomSearchAttributes
// in common/searchattribute/sadefs/constants.go, the pre-allocated columns
// Bool01…Bool03, …, Keyword01…Keyword10 of
// schema/postgresql/v12/visibility/schema.sql.
var sqlVisibilityLimits = map[enumspb.IndexedValueType]int{
	enumspb.INDEXED_VALUE_TYPE_BOOL:         3,
	enumspb.INDEXED_VALUE_TYPE_DATETIME:     3,
	enumspb.INDEXED_VALUE_TYPE_DOUBLE:       3,
	enumspb.INDEXED_VALUE_TYPE_INT:          3,
	enumspb.INDEXED_VALUE_TYPE_KEYWORD:      10,
	enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST: 3,
	enumspb.INDEXED_VALUE_TYPE_TEXT:         3,
}

// TestSearchAttributesLeaveRoom: capstan's search attributes take at most
// one of each type SQL visibility allows three of, and at most a third
// of the Keywords, so a namespace keeps room for its own.
func TestSearchAttributesLeaveRoom(t *testing.T) {
	t.Parallel()
	used := map[enumspb.IndexedValueType][]string{}
	for _, k := range workflows.SearchAttributes {
		used[k.GetValueType()] = append(used[k.GetValueType()], k.GetName())
	}
	for typ, names := range used {
		limit, ok := sqlVisibilityLimits[typ]
		if !ok {
			t.Errorf("%v is not a type SQL visibility stores (%v)", typ, names)
			continue
		}
		if max := max(1, limit/3); len(names) > max {
			t.Errorf("capstan takes %d %v attributes %v of the %d SQL visibility allows; at most %d leaves room for the user's", len(names), typ, names, limit, max)
		}
	}
	if n := len(used[enumspb.INDEXED_VALUE_TYPE_BOOL]); n != 0 {
		t.Errorf("capstan registers %d Bool attributes, want none", n)
	}
}

// FlagQuery names the Bool only where the namespace defines it.
func TestFlagQuery(t *testing.T) {
	t.Parallel()
	if got, want := workflows.FlagQuery(workflows.FlagNeedsHuman, false), "CapstanFlags = 'needs_human'"; got != want {
		t.Errorf("FlagQuery(needs_human, false) = %q, want %q", got, want)
	}
	if got, want := workflows.FlagQuery(workflows.FlagAwaitingApproval, true), "(CapstanFlags = 'awaiting_approval' OR CapstanAwaitingApproval = true)"; got != want {
		t.Errorf("FlagQuery(awaiting_approval, true) = %q, want %q", got, want)
	}
	for _, f := range workflows.Flags {
		if !slices.Contains(workflows.LegacySearchAttributes, temporal.SearchAttributeKey(workflows.LegacyFlagAttribute(f))) {
			t.Errorf("LegacyFlagAttribute(%s) = %s, not in LegacySearchAttributes", f, workflows.LegacyFlagAttribute(f).GetName())
		}
	}
}

// A delivery given up says dead_letter in CapstanFlags, which stays as
// the task ends; before changeSearchFlags, CapstanDeadLetter = true.
func TestDeadLetterIsAFlag(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		version workflow.Version
		want    []string
	}{
		{"since search-flags", 1, []string{"CapstanFlags=[dead_letter]"}},
		{"before search-flags", workflow.DefaultVersion, []string{"CapstanDeadLetter=true"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			env.RegisterActivity(&activities.Activities{})
			deliveryFails(temporal.NewNonRetryableApplicationError("refused", contract.ErrTypeDeliveryFailed, nil))(env)
			env.OnGetVersion("search-flags", workflow.DefaultVersion, 1).Return(c.version)
			got := upserts(env)
			env.ExecuteWorkflow(workflows.AgentTask, workflows.AgentTaskInput{TaskID: "T", Tenant: "default", Prompt: "p", Model: "openai:m", SlackChannel: "#eng"})
			if res := taskResult(t, env.GetWorkflowError()); res.FailureCode != workflows.FailDeliveryFailed {
				t.Fatalf("result %+v; want delivery_failed", res)
			}
			if flags := named(got(), flagNames...); !slices.Equal(flags, c.want) {
				t.Errorf("flag upserts = %q, want %q (all %q)", flags, c.want, got())
			}
		})
	}
}
