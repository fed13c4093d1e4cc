package activities_test

import (
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/capstanhq/capstan/internal/activities"
	"github.com/capstanhq/capstan/internal/contract"
	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/internal/redact"
	githubtools "github.com/capstanhq/capstan/internal/tools/github"
)

// spans records the spans of the package's tests: the activities start
// theirs from OpenTelemetry's global provider, set once here. Tests that
// read it tell their spans apart by task id.
var spans = sync.OnceValue(func() *tracetest.SpanRecorder {
	rec := tracetest.NewSpanRecorder()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)))
	return rec
})

// attrsOf are the attributes of the ended spans of task, by span name.
func attrsOf(task string) map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, s := range spans().Ended() {
		a := map[string]string{}
		for _, kv := range s.Attributes() {
			a[string(kv.Key)] = kv.Value.String()
		}
		if a["capstan.task_id"] == task {
			out[s.Name()] = a
		}
	}
	return out
}

// A model attempt's span and a tool call's carry the GenAI attributes and
// no content; with CAPSTAN_TRACE_CONTENT they carry the answer and the
// arguments, masked. The prompt is never an attribute.
func TestSpansCarryContentOnlyWhenAsked(t *testing.T) {
	spans()
	const prompt = "TRACE-PROMPT: write HELLO.md for task"
	for _, content := range []bool{false, true} {
		task := "span-off"
		if content {
			task = "span-on"
		}
		f := newFixture(t, func(d *activities.Deps) {
			d.TraceContent = content
			d.Redactor = redact.New("capstan-sandbox")
		})
		out := f.modelTurn(t, contract.ModelTurnInput{TaskID: task, TurnID: task + "/t1", AttemptID: task + "/t1/a1", Model: "sandbox:demo",
			Seed: []model.Message{{Role: model.RoleSystem, Content: "You are a test.\nTask id: " + task}, {Role: model.RoleUser, Content: prompt}}})
		call := out.ToolCalls[0]
		f.executeTool(t, contract.ExecuteToolInput{Tenant: "default", TaskID: task, TurnID: task + "/t1", ToolCallID: call.ID,
			OperationID: "default:" + task + ":branch", Tool: call.Name, Arguments: call.Arguments})

		got := attrsOf(task)
		chat, tool := got["chat demo"], got["execute_tool "+githubtools.NameCreateBranch]
		if chat == nil || tool == nil {
			t.Fatalf("content %v: spans %v, want chat demo and execute_tool %s", content, got, githubtools.NameCreateBranch)
		}
		if chat["gen_ai.provider.name"] != "openai" || chat["gen_ai.request.model"] != "demo" || chat["gen_ai.usage.input_tokens"] == "" ||
			chat["gen_ai.response.finish_reasons"] != `["tool_calls"]` || chat["capstan.outcome"] != "completed" {
			t.Errorf("content %v: chat span %v, want the GenAI attributes", content, chat)
		}
		if tool["capstan.tool.class"] != "conditional" || tool["capstan.outcome"] != "succeeded" || tool["gen_ai.tool.call.id"] != call.ID {
			t.Errorf("content %v: tool span %v, want class, outcome and call id", content, tool)
		}
		for name, a := range got {
			for k, v := range a {
				if strings.Contains(v, "TRACE-PROMPT") {
					t.Errorf("content %v: span %s attribute %s holds the prompt", content, name, k)
				}
				if strings.Contains(v, "capstan-sandbox") {
					t.Errorf("content %v: span %s attribute %s holds a secret unmasked: %s", content, name, k, v)
				}
			}
		}
		_, answer := chat["gen_ai.output.messages"]
		_, args := tool["gen_ai.tool.call.arguments"]
		if answer != content || args != content {
			t.Errorf("content %v: answer in the chat span %v, arguments in the tool span %v; want both %v", content, answer, args, content)
		}
		if content && !strings.Contains(tool["gen_ai.tool.call.arguments"], "[redacted]") {
			t.Errorf("tool call arguments %q, want the secret masked", tool["gen_ai.tool.call.arguments"])
		}
	}
}
