package github_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/capstanhq/capstan/tool"
)

// validArgs holds, for every tool, one arguments object it accepts. A tool
// added without one fails TestAdvertisedSchemaIsEnforced.
var validArgs = map[string]string{
	"github_get_file":            `{"repo":"acme/app","path":"src/main.go","ref":"main"}`,
	"github_list_pull_requests":  `{"repo":"acme/app","head":"agent/fix","base":"main","state":"all"}`,
	"github_create_branch":       `{"repo":"acme/app","branch":"agent/fix","from":"main"}`,
	"github_put_file":            `{"repo":"acme/app","branch":"agent/fix","path":"docs/a.md","content":"x","message":"m"}`,
	"github_create_pull_request": `{"repo":"acme/app","head":"agent/fix","base":"main","title":"t","body":"b"}`,
	"github_comment":             `{"repo":"acme/app","number":3,"body":"hi"}`,
}

func TestSchemasAreStrictObjects(t *testing.T) {
	r := offlineTools(t)
	want := []string{"github_comment", "github_create_branch", "github_create_pull_request",
		"github_get_file", "github_list_pull_requests", "github_put_file"}
	if got := strings.Join(r.Names(), ","); got != strings.Join(want, ",") {
		t.Fatalf("names = %s", got)
	}
	classes := map[string]tool.Class{
		"github_get_file": tool.ReadOnly, "github_list_pull_requests": tool.ReadOnly,
		"github_create_branch": tool.Conditional, "github_put_file": tool.Idempotent,
		"github_create_pull_request": tool.Conditional, "github_comment": tool.Unsafe,
	}
	for _, spec := range r.Specs() {
		impl, _ := r.Get(spec.Name)
		if impl.Class() != classes[spec.Name] {
			t.Errorf("%s: class %s, want %s", spec.Name, impl.Class(), classes[spec.Name])
		}
		s := spec.Parameters
		props, _ := s["properties"].(map[string]any)
		required, _ := s["required"].([]any)
		if s["type"] != "object" || s["additionalProperties"] != false || len(required) == 0 || spec.Description == "" {
			t.Errorf("%s: schema %v", spec.Name, s)
		}
		for _, name := range required {
			if props[name.(string)] == nil {
				t.Errorf("%s: required %q has no property", spec.Name, name)
			}
		}
		for name, p := range props {
			if d, _ := p.(map[string]any)["description"].(string); d == "" {
				t.Errorf("%s.%s: no description", spec.Name, name)
			}
		}
		s["type"] = "mutated"
		if impl.Schema().Doc()["type"] != "object" {
			t.Errorf("%s: the advertised schema is shared state", spec.Name)
		}
	}
}

// TestAdvertisedSchemaIsEnforced compiles, on its own, the schema every
// registered tool advertises to a model, exactly as the model receives it
// (JSON), and checks each tool against it on variants of a valid call: an
// unknown field, each required field left out, each field of the wrong type.
// Whatever the advertised schema rejects, Identify and Execute reject as
// invalid arguments; what it accepts, the tool's compiled schema accepts too.
// So the schema a model is shown is the one its calls are held to.
func TestAdvertisedSchemaIsEnforced(t *testing.T) {
	r := offlineTools(t)
	for _, spec := range r.Specs() {
		impl, _ := r.Get(spec.Name)
		advertised := compileAdvertised(t, spec.Parameters)
		valid, ok := validArgs[spec.Name]
		if !ok {
			t.Errorf("%s: no valid example in validArgs", spec.Name)
			continue
		}
		variants := argumentVariants(t, spec.Parameters, valid)
		for _, args := range append([]string{valid}, variants...) {
			inst, err := jsonschema.UnmarshalJSON(strings.NewReader(args))
			if err != nil {
				t.Fatalf("%s: variant %s: %v", spec.Name, args, err)
			}
			advertisedErr := advertised.Validate(inst)
			compiledErr := impl.Schema().Validate(json.RawMessage(args))
			if (advertisedErr == nil) != (compiledErr == nil) {
				t.Errorf("%s %s: advertised schema says %v, compiled schema says %v", spec.Name, args, advertisedErr, compiledErr)
			}
			_, identifyErr := impl.Identify(json.RawMessage(args))
			_, executeErr := impl.Execute(context.Background(), tool.Call{OperationID: "op", Arguments: json.RawMessage(args)})
			if advertisedErr != nil {
				if !errors.Is(identifyErr, tool.ErrInvalidArguments) || !errors.Is(executeErr, tool.ErrInvalidArguments) {
					t.Errorf("%s %s: the advertised schema rejects it (%v), but Identify says %v and Execute says %v",
						spec.Name, args, advertisedErr, identifyErr, executeErr)
				}
				continue
			}
			if args == valid && identifyErr != nil {
				t.Errorf("%s %s: the valid example is rejected: %v", spec.Name, args, identifyErr)
			}
		}
		if len(variants) < 3 {
			t.Errorf("%s: only %d variants; the test checks nothing", spec.Name, len(variants))
		}
	}
}

func compileAdvertised(t *testing.T, params map[string]any) *jsonschema.Schema {
	t.Helper()
	raw, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("https://example.test/advertised.json", doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile("https://example.test/advertised.json")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// argumentVariants derives calls from valid that break the advertised
// schema in one way each.
func argumentVariants(t *testing.T, params map[string]any, valid string) []string {
	t.Helper()
	var base map[string]any
	if err := json.Unmarshal([]byte(valid), &base); err != nil {
		t.Fatal(err)
	}
	encode := func(m map[string]any) string {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	with := func(change func(map[string]any)) string {
		m := maps.Clone(base)
		change(m)
		return encode(m)
	}
	variants := []string{with(func(m map[string]any) { m["unexpected"] = "x" })}
	required, _ := params["required"].([]any)
	for _, name := range required {
		variants = append(variants, with(func(m map[string]any) { delete(m, name.(string)) }))
	}
	props, _ := params["properties"].(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(props)) {
		for _, wrong := range []any{42, 1.5, true, nil, []any{}, map[string]any{}, "text"} {
			variants = append(variants, with(func(m map[string]any) { m[name] = wrong }))
		}
	}
	return variants
}

func TestIdentifyRejectsWhatTheSchemaRejects(t *testing.T) {
	r := offlineTools(t)
	for _, tc := range []struct {
		impl, args, want string
	}{
		{"github_get_file", `{"repo":"acme/app","path":"a","refs":"main"}`,
			`field "refs" is not allowed; the allowed fields are "path", "ref", "repo"`},
		{"github_create_pull_request", `{"repo":"acme/app","head":"x","base":"main","title":"t","body":"","draft":true}`,
			`field "draft" is not allowed`},
		{"github_create_branch", `{"repo":"acme/app","branch":"x"}`, `field "from" is required`},
		{"github_comment", `{"repo":"acme/app","number":"3","body":"x"}`, `field "number" must be an integer, not a string`},
		{"github_comment", `{"repo":"acme/app","number":0,"body":"x"}`, `field "number" must be at least 1, not 0`},
		{"github_put_file", `{"repo":"acme/app","branch":"b","path":"a","content":null,"message":"m"}`,
			`field "content" must be a string, not null`},
		{"github_list_pull_requests", `{"repo":"acme/app","state":"merged"}`,
			`field "state" must be one of "open", "closed", "all", not "merged"`},
		{"github_get_file", `{"repo":"acme","path":"a"}`, `field "repo" must match the pattern`},
		{"github_get_file", `[]`, `the arguments must be a JSON object, not an array`},
	} {
		impl, err := r.Get(tc.impl)
		if err != nil {
			t.Fatal(err)
		}
		_, err = impl.Identify(json.RawMessage(tc.args))
		if !errors.Is(err, tool.ErrInvalidArguments) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: err = %v, want ErrInvalidArguments saying %q", tc.impl, tc.args, err, tc.want)
		}
	}
}

func TestSummaries(t *testing.T) {
	r := offlineTools(t)
	for _, tc := range []struct{ impl, args, want string }{
		{"github_create_pull_request", validArgs["github_create_pull_request"], "create_pull_request acme/app agent/fix → main"},
		{"github_create_branch", validArgs["github_create_branch"], "create_branch acme/app agent/fix from main"},
		{"github_put_file", validArgs["github_put_file"], "put_file acme/app agent/fix:docs/a.md"},
		{"github_get_file", validArgs["github_get_file"], "get_file acme/app src/main.go@main"},
		{"github_get_file", `{"repo":"acme/app","path":"README.md"}`, "get_file acme/app README.md"},
		{"github_comment", validArgs["github_comment"], "comment acme/app #3"},
		{"github_list_pull_requests", validArgs["github_list_pull_requests"], "list_pull_requests acme/app"},
		{"github_comment", `{"repo":"acme/app"}`, "comment"}, // rejected arguments: the name alone
	} {
		impl, err := r.Get(tc.impl)
		if err != nil {
			t.Fatal(err)
		}
		if got := impl.Summary(json.RawMessage(tc.args)); got != tc.want {
			t.Errorf("%s %s: Summary = %q, want %q", tc.impl, tc.args, got, tc.want)
		}
	}
}
