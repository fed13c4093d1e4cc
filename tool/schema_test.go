package tool_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/tool"
)

// issueSchema is a small schema with every kind of rule the tools use.
var issueSchema = tool.MustSchema(map[string]any{
	"type":                 "object",
	"required":             []string{"repo", "number"},
	"additionalProperties": false,
	"properties": map[string]any{
		"repo":   map[string]any{"type": "string", "pattern": `^[a-z]+/[a-z]+$`, "description": `Repository as "owner/name".`},
		"number": map[string]any{"type": "integer", "minimum": 1},
		"state":  map[string]any{"type": "string", "enum": []string{"open", "closed"}},
		"labels": map[string]any{"type": "array", "items": map[string]any{"type": "string", "maxLength": 5}},
		"author": map[string]any{"type": "object", "required": []string{"login"}, "additionalProperties": false,
			"properties": map[string]any{"login": map[string]any{"type": "string"}}},
	},
})

func TestSchemaAccepts(t *testing.T) {
	for _, args := range []string{
		`{"repo":"acme/app","number":1}`,
		`{"repo":"acme/app","number":3.0,"state":"closed","labels":["bug"],"author":{"login":"x"}}`,
		` {"number":2, "repo":"acme/app"} `,
	} {
		if err := issueSchema.Validate(json.RawMessage(args)); err != nil {
			t.Errorf("Validate(%s) = %v", args, err)
		}
	}
}

func TestSchemaRejectsWithOneSentence(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{`{"repo":"acme/app","number":1,"extra":true}`, `field "extra" is not allowed; the allowed fields are "author", "labels", "number", "repo", "state"`},
		{`{"repo":"acme/app","number":1,"zz":1,"aa":2}`, `field "aa" is not allowed`},
		{`{"repo":"acme/app"}`, `field "number" is required`},
		{`{}`, `field "repo" is required`},
		{`{"repo":7,"number":1}`, `field "repo" must be a string, not a number`},
		{`{"repo":"acme/app","number":"1"}`, `field "number" must be an integer, not a string`},
		{`{"repo":"acme/app","number":1.5}`, `field "number" must be an integer, not a number`},
		{`{"repo":"acme/app","number":0}`, `field "number" must be at least 1, not 0`},
		{`{"repo":"acme/app","number":1,"state":"merged"}`, `field "state" must be one of "open", "closed", not "merged"`},
		{`{"repo":"Acme","number":1}`, `field "repo" must match the pattern ^[a-z]+/[a-z]+$, but "Acme" does not (Repository as "owner/name")`},
		{`{"repo":"acme/app","number":1,"labels":["bug","enhancement"]}`, `field "labels.1" must be at most 5 characters long, not 11`},
		{`{"repo":"acme/app","number":1,"author":{}}`, `field "author.login" is required`},
		{`{"repo":"acme/app","number":1,"author":{"login":"x","id":1}}`, `field "author.id" is not allowed; the allowed fields are "login"`},
		{`null`, `the arguments must be a JSON object, not null`},
		{`[1]`, `the arguments must be a JSON object, not an array`},
		{`"x"`, `the arguments must be a JSON object, not a string`},
		{``, `the arguments must be a JSON object, but there are none`},
		{`{"repo":`, `the arguments are not valid JSON`},
		{`{"repo":"acme/app","number":1} {}`, `the arguments are not valid JSON`},
	} {
		err := issueSchema.Validate(json.RawMessage(tc.args))
		if !errors.Is(err, tool.ErrInvalidArguments) {
			t.Errorf("Validate(%s) = %v, want ErrInvalidArguments", tc.args, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("Validate(%s) = %q, want one line saying %q", tc.args, msg, tc.want)
		}
	}
}

// With several problems, the message names the same one every time, though
// the validator visits fields in map order.
func TestSchemaNamesTheSameProblemEveryTime(t *testing.T) {
	args := json.RawMessage(`{"repo":1,"number":"x","state":2,"labels":3,"author":4}`)
	first := issueSchema.Validate(args).Error()
	if !strings.Contains(first, `field "author"`) {
		t.Errorf("first problem %q, want the field first by name", first)
	}
	for range 50 {
		if got := issueSchema.Validate(args).Error(); got != first {
			t.Fatalf("message varies: %q, then %q", first, got)
		}
	}
}

func TestSchemaDocIsAFreshCopy(t *testing.T) {
	doc := issueSchema.Doc()
	if doc["type"] != "object" || doc["additionalProperties"] != false {
		t.Fatalf("Doc = %v", doc)
	}
	doc["additionalProperties"] = true
	doc["properties"].(map[string]any)["repo"] = nil
	again := issueSchema.Doc()
	if again["additionalProperties"] != false || again["properties"].(map[string]any)["repo"] == nil {
		t.Error("Doc returns shared state")
	}
	if err := issueSchema.Validate(json.RawMessage(`{"repo":"acme/app","number":1,"extra":1}`)); err == nil {
		t.Error("changing a Doc copy changed what is validated")
	}
}

func TestNewSchemaRejectsAnInvalidSchema(t *testing.T) {
	for _, doc := range []map[string]any{
		{"type": 5},
		{"type": "object", "required": "repo"},
		{"type": "string", "pattern": "("},
		{"bad": func() {}},
	} {
		if _, err := tool.NewSchema(doc); err == nil {
			t.Errorf("NewSchema(%v) accepted an invalid schema", doc)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("MustSchema did not panic on an invalid schema")
		}
	}()
	tool.MustSchema(map[string]any{"type": 5})
}
