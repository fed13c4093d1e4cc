package capstantest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/capstantest"
)

// TestScriptBothWires: a script a test adds plays in OpenAI's and
// Anthropic's wire formats, {{task_id}} taken from the system prompt, the
// tool call's arguments as given.
func TestScriptBothWires(t *testing.T) {
	sb := capstantest.StartSandbox(t)
	sb.Script("greet",
		capstantest.Step{Text: "Hello from {{task_id}}.", Calls: []capstantest.Call{{Tool: "create_ticket",
			Arguments: struct {
				Title string `json:"title"`
			}{"for {{task_id}}"}}}},
		capstantest.Step{Text: "Done."})
	for _, wire := range []struct{ name, url, body string }{
		{"openai", sb.ModelURL() + "/chat/completions",
			`{"model": "greet", "stream": true, "messages": [{"role": "system", "content": "Task id: t-42"}, {"role": "user", "content": "hi"}]}`},
		{"anthropic", sb.AnthropicURL() + "v1/messages",
			`{"model": "greet", "stream": true, "max_tokens": 100, "system": "Task id: t-42", "messages": [{"role": "user", "content": "hi"}]}`},
	} {
		t.Run(wire.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, wire.url, strings.NewReader(wire.body))
			req.Header.Set("Content-Type", "application/json")
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			text, args := reassemble(t, string(b))
			if resp.StatusCode != http.StatusOK || text != "Hello from t-42." || args != `{"title":"for t-42"}` || !strings.Contains(string(b), `"create_ticket"`) {
				t.Fatalf("%s: text %q, arguments %q in\n%s", resp.Status, text, args, b)
			}
		})
	}
	if c := sb.Counts(); c.ModelRequests != 2 {
		t.Fatalf("counts %+v, want 2 model requests", c)
	}
}

// reassemble joins the text and the tool call's argument fragments of an
// event stream in either wire format.
func reassemble(t *testing.T, stream string) (text, args string) {
	t.Helper()
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				s, ok := x.(string)
				switch {
				case ok && (k == "content" || k == "text"):
					text += s
				case ok && (k == "arguments" || k == "partial_json"):
					args += s
				default:
					walk(x)
				}
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	for line := range strings.Lines(stream) {
		data, ok := strings.CutPrefix(strings.TrimSpace(line), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			t.Fatalf("%v: %s", err, data)
		}
		if d, ok := v["delta"]; ok { // Anthropic: only the deltas carry text
			walk(d)
		} else {
			walk(v["choices"])
		}
	}
	return text, args
}
