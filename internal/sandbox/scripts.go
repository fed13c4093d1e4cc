package sandbox

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
)

// scriptFiles holds the model fake's scripts. They are data, not code, so a
// new scenario is a new JSON file and no Go change.
//
//go:embed scripts/*.json
var scriptFiles embed.FS

// scriptsByName is the parsed, validated set of embedded scripts. It is built
// once at package initialisation and never modified, so it is safe to share
// between servers and goroutines. A malformed file is a build mistake, caught
// by the package's tests, so loading panics rather than limping on.
var scriptsByName = mustLoadScripts()

// turnsPrefix names the generated script family turns-N.
const turnsPrefix = "turns-"

// maxTurns bounds the turns-N family so one request cannot ask for an
// arbitrarily large script.
const maxTurns = 1000

// exhaustedText is what the model says when a request asks for a step past a
// script's last one.
const exhaustedText = "The script has no more steps."

// script is a model conversation played one step per request.
type script struct {
	Name  string `json:"name"`
	Steps []step `json:"steps"`
}

// step is one model answer: text, tool calls, or both. A step without tool
// calls ends the conversation (finish reason "stop").
type step struct {
	Text      string     `json:"text"`
	ToolCalls []toolCall `json:"tool_calls"`
	// Fault makes the requests that play this step misbehave: a model
	// fault rule without an endpoint, such as {"kind":"stall",
	// "after_events":3} or {"kind":"status","status":529,"times":1}.
	// Times counts the plays of this step since the fake started (0:
	// every play). A fault rule on the endpoint takes precedence.
	Fault *faultRuleJSON `json:"fault,omitempty"`
	fault *FaultRule     // Fault, checked and with its defaults
}

// toolCall is a function call the model asks for. Arguments holds compact
// JSON with the key order of the script file, which is exactly the string the
// fake streams, so a test can compare the reassembled arguments byte for byte.
type toolCall struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
}

// ScriptNames returns the names of the embedded scripts, sorted. The generated
// family turns-N (1 ≤ N ≤ 1000) is always available as well and is not listed.
func ScriptNames() []string {
	names := make([]string, 0, len(scriptsByName))
	for name := range scriptsByName {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// lookupScript resolves a model name to a script: an embedded one, or a
// generated turns-N.
func lookupScript(name string) (*script, bool) {
	if s, ok := scriptsByName[name]; ok {
		return s, true
	}
	if n, ok := parseTurns(name); ok {
		return turnsScript(n), true
	}
	return nil, false
}

// stepAt returns step i (0-based). Past the last step the model says it has
// nothing more to do and stops, so a client that keeps asking ends cleanly.
func (s *script) stepAt(i int) step {
	if i < 0 || i >= len(s.Steps) {
		return step{Text: exhaustedText}
	}
	return s.Steps[i]
}

// taskPlaceholder in a script's text or arguments stands for the task id the
// conversation's system message names ("Task id: <id>" on a line of its
// own), so a script can name branches per task and a second run of the same
// script does not collide with the first. Without a task id it expands to
// "task".
const taskPlaceholder = "{{task_id}}"

// expand replaces taskPlaceholder in the step. The task id is restricted to
// characters that need no escaping inside a JSON string.
func (st step) expand(taskID string) step {
	if taskID == "" {
		taskID = "task"
	}
	out := step{Text: strings.ReplaceAll(st.Text, taskPlaceholder, taskID), fault: st.fault}
	for _, tc := range st.ToolCalls {
		tc.Arguments = bytes.ReplaceAll(tc.Arguments, []byte(taskPlaceholder), []byte(taskID))
		out.ToolCalls = append(out.ToolCalls, tc)
	}
	return out
}

// findTaskID reads "Task id: <id>" from a system message.
func findTaskID(text string) string {
	for _, line := range strings.Split(text, "\n") {
		if id, ok := strings.CutPrefix(strings.TrimSpace(line), "Task id: "); ok && validTaskID(id) {
			return id
		}
	}
	return ""
}

func validTaskID(id string) bool {
	if id == "" || len(id) > 100 {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// messageText is the text of a chat message's content, which is either a
// string or an array of parts.
func messageText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Text string `json:"text"`
	}
	_ = json.Unmarshal(raw, &parts)
	var b strings.Builder
	for _, p := range parts {
		b.WriteString(p.Text)
		b.WriteString("\n")
	}
	return b.String()
}

// parseTurns reports N for a model name "turns-N" with N in [1, maxTurns].
// Leading zeros and signs are rejected so that each N has one name and one
// per-script counter.
func parseTurns(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, turnsPrefix)
	if !ok || digits == "" || digits[0] < '1' || digits[0] > '9' {
		return 0, false
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 1 || n > maxTurns {
		return 0, false
	}
	return n, true
}

// turnsArguments is the read-only call every non-final turns-N step makes.
const turnsArguments = `{"repo":"capstan-sandbox/demo","path":"README.md"}`

// turnsScript builds turns-N: steps 1..N-1 read the demo README (a read-only
// tool, so the scenario measures turn overhead rather than side effects), and
// step N answers with text only.
func turnsScript(n int) *script {
	s := &script{Name: turnsPrefix + strconv.Itoa(n), Steps: make([]step, n)}
	for i := range n - 1 {
		s.Steps[i] = step{
			Text:      fmt.Sprintf("Turn %d: reading README.md again.", i+1),
			ToolCalls: []toolCall{{Name: "github_get_file", Arguments: json.RawMessage(turnsArguments)}},
		}
	}
	s.Steps[n-1] = step{Text: fmt.Sprintf("Finished after %d turns.", n)}
	return s
}

// mustLoadScripts parses and validates every embedded script.
func mustLoadScripts() map[string]*script {
	m, err := loadScripts()
	if err != nil {
		panic(err)
	}
	return m
}

func loadScripts() (map[string]*script, error) {
	files, err := scriptFiles.ReadDir("scripts")
	if err != nil {
		return nil, fmt.Errorf("sandbox: read embedded scripts: %w", err)
	}
	m := make(map[string]*script, len(files))
	for _, f := range files {
		file := path.Join("scripts", f.Name())
		data, err := scriptFiles.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("sandbox: read %s: %w", file, err)
		}
		s, err := parseScript(data)
		if err != nil {
			return nil, fmt.Errorf("sandbox: %s: %w", file, err)
		}
		if want := strings.TrimSuffix(f.Name(), ".json"); s.Name != want {
			return nil, fmt.Errorf("sandbox: %s: script is named %q, want %q (the file name)", file, s.Name, want)
		}
		m[s.Name] = s
	}
	return m, nil
}

// parseScript decodes one script file, checks it, and compacts each tool
// call's arguments.
func parseScript(data []byte) (*script, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var s script
	if err := dec.Decode(&s); err != nil {
		return nil, err
	}
	if s.Name == "" {
		return nil, fmt.Errorf("script has no name")
	}
	if _, ok := parseTurns(s.Name); ok {
		return nil, fmt.Errorf("script name %q collides with the generated turns-N family", s.Name)
	}
	if len(s.Steps) == 0 {
		return nil, fmt.Errorf("script %q has no steps", s.Name)
	}
	for i := range s.Steps {
		st := &s.Steps[i]
		if st.Text == "" && len(st.ToolCalls) == 0 {
			return nil, fmt.Errorf("step %d is empty", i+1)
		}
		if st.Fault != nil {
			rule, err := stepFaultRule(*st.Fault)
			if err != nil {
				return nil, fmt.Errorf("step %d: %w", i+1, err)
			}
			st.fault = &rule
		}
		for j := range st.ToolCalls {
			tc := &st.ToolCalls[j]
			if tc.Name == "" {
				return nil, fmt.Errorf("step %d, tool call %d has no name", i+1, j+1)
			}
			var args map[string]any
			if err := json.Unmarshal(tc.Arguments, &args); err != nil || args == nil {
				return nil, fmt.Errorf("step %d, tool call %s: arguments must be a JSON object", i+1, tc.Name)
			}
			var buf bytes.Buffer
			if err := json.Compact(&buf, tc.Arguments); err != nil {
				return nil, fmt.Errorf("step %d, tool call %s: %w", i+1, tc.Name, err)
			}
			tc.Arguments = buf.Bytes()
		}
	}
	return &s, nil
}

// stepFaultRule checks a step's fault as the model checks its rules, except
// that a step's fault names no endpoint: it applies in both wire formats.
func stepFaultRule(j faultRuleJSON) (FaultRule, error) {
	if j.Endpoint != "" {
		return FaultRule{}, fmt.Errorf("fault: a step's fault names no endpoint (got %q)", j.Endpoint)
	}
	rule, err := j.rule()
	if err != nil {
		return FaultRule{}, err
	}
	if rule.Kind == FaultRefuseConnection {
		return FaultRule{}, fmt.Errorf("fault: refuse_connection closes the model's port, so it cannot strike one step; use a fault rule")
	}
	if err := validateFault(modelFaultDialect, &rule); err != nil {
		return FaultRule{}, fmt.Errorf("fault %s: %w", rule.Kind, err)
	}
	return rule, nil
}
