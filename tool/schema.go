package tool

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// Schema is the JSON Schema of a tool's arguments object, compiled once.
// What a model is shown (Doc) and what its arguments are checked against
// (Validate) are the same bytes, so the two cannot drift apart. A Schema is
// immutable and safe for concurrent use.
type Schema struct {
	doc      []byte // the schema document, JSON-encoded
	compiled *jsonschema.Schema
}

// schemaURL names the one resource each Schema compiles. It is absolute, so
// the compiler never resolves it against the working directory.
const schemaURL = "urn:capstan:tool-arguments"

// NewSchema compiles doc, a JSON Schema (draft 2020-12 unless it says
// otherwise) of a tool's arguments object.
func NewSchema(doc map[string]any) (*Schema, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("tool schema: encode: %w", err)
	}
	parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("tool schema: decode: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(schemaURL, parsed); err != nil {
		return nil, fmt.Errorf("tool schema: %w", err)
	}
	compiled, err := c.Compile(schemaURL)
	if err != nil {
		return nil, fmt.Errorf("tool schema: compile: %w", err)
	}
	return &Schema{doc: raw, compiled: compiled}, nil
}

// MustSchema is NewSchema for a schema that is a constant of the program,
// where an error is a programming error: it panics.
func MustSchema(doc map[string]any) *Schema {
	s, err := NewSchema(doc)
	if err != nil {
		panic(err)
	}
	return s
}

// Doc returns the schema document as a model is shown it: a fresh copy the
// caller may change.
func (s *Schema) Doc() map[string]any {
	var doc map[string]any
	if err := json.Unmarshal(s.doc, &doc); err != nil {
		panic(fmt.Sprintf("tools: decode a schema encoded by NewSchema: %v", err)) // it round-trips
	}
	return doc
}

// Validate checks that args is a JSON object the schema accepts. Its error
// wraps ErrInvalidArguments and says in one sentence what is wrong and, when
// a field is at fault, which one — e.g. `field "number" must be at least 1`
// — so that a model can correct its call. When several things are wrong it
// names the same one every time.
func (s *Schema) Validate(args json.RawMessage) error {
	if len(bytes.TrimSpace(args)) == 0 {
		return fmt.Errorf("%w: the arguments must be a JSON object, but there are none", ErrInvalidArguments)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return fmt.Errorf("%w: the arguments are not valid JSON (%v)", ErrInvalidArguments, err)
	}
	err = s.compiled.Validate(inst)
	var verr *jsonschema.ValidationError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &verr):
		return fmt.Errorf("%w: %s", ErrInvalidArguments, s.explain(firstLeaf(verr)))
	default:
		return fmt.Errorf("%w: %v", ErrInvalidArguments, err)
	}
}

// firstLeaf returns the most specific problem of a validation error: of its
// leaves, the first by instance location (the arguments object itself before
// its fields, fields by name) and then by keyword. The validator walks
// properties in map order, so without this sort the message would vary.
func firstLeaf(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	var leaves []*jsonschema.ValidationError
	var walk func(*jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			leaves = append(leaves, e)
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(e)
	key := func(e *jsonschema.ValidationError) string {
		return strings.Join(e.InstanceLocation, "\x00") + "\x01" + strings.Join(e.ErrorKind.KeywordPath(), "/")
	}
	return slices.MinFunc(leaves, func(a, b *jsonschema.ValidationError) int { return strings.Compare(key(a), key(b)) })
}

// printer renders the library's own messages for problems explain has no
// sentence of its own for.
var printer = message.NewPrinter(language.English)

// explain says what is wrong in one sentence, naming the field.
func (s *Schema) explain(e *jsonschema.ValidationError) string {
	subject := "the arguments"
	if len(e.InstanceLocation) > 0 {
		subject = fmt.Sprintf("field %q", strings.Join(e.InstanceLocation, "."))
	}
	field := func(name string) string {
		return fmt.Sprintf("field %q", strings.Join(append(slices.Clone(e.InstanceLocation), name), "."))
	}
	switch k := e.ErrorKind.(type) {
	case *kind.Required:
		return field(k.Missing[0]) + " is required"
	case *kind.AdditionalProperties:
		unknown := slices.Sorted(slices.Values(k.Properties))
		msg := field(unknown[0]) + " is not allowed"
		if props, ok := s.at(e.SchemaURL)["properties"].(map[string]any); ok && len(props) > 0 {
			names := make([]string, 0, len(props))
			for name := range props {
				names = append(names, fmt.Sprintf("%q", name))
			}
			slices.Sort(names)
			msg += "; the allowed fields are " + strings.Join(names, ", ")
		}
		return msg
	case *kind.Type:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = typeName(w)
		}
		return fmt.Sprintf("%s must be %s, not %s", subject, strings.Join(want, " or "), typeName(k.Got))
	case *kind.Enum:
		want := make([]string, len(k.Want))
		for i, w := range k.Want {
			want[i] = jsonText(w)
		}
		return fmt.Sprintf("%s must be one of %s, not %s", subject, strings.Join(want, ", "), jsonText(k.Got))
	case *kind.Const:
		return fmt.Sprintf("%s must be %s, not %s", subject, jsonText(k.Want), jsonText(k.Got))
	case *kind.Pattern:
		msg := fmt.Sprintf("%s must match the pattern %s, but %q does not", subject, k.Want, k.Got)
		if d, _ := s.at(e.SchemaURL)["description"].(string); d != "" {
			msg += " (" + strings.TrimSuffix(d, ".") + ")"
		}
		return msg
	case *kind.Minimum:
		return fmt.Sprintf("%s must be at least %s, not %s", subject, k.Want.RatString(), k.Got.RatString())
	case *kind.Maximum:
		return fmt.Sprintf("%s must be at most %s, not %s", subject, k.Want.RatString(), k.Got.RatString())
	case *kind.MinLength:
		return fmt.Sprintf("%s must be at least %d characters long, not %d", subject, k.Want, k.Got)
	case *kind.MaxLength:
		return fmt.Sprintf("%s must be at most %d characters long, not %d", subject, k.Want, k.Got)
	case *kind.FalseSchema:
		return subject + " is not allowed"
	default:
		return fmt.Sprintf("%s is invalid: %s", subject, k.LocalizedString(printer))
	}
}

// at returns the part of the schema document at an absolute schema location
// the validator reported ("urn:…#/properties/repo"), or nil.
func (s *Schema) at(location string) map[string]any {
	_, fragment, _ := strings.Cut(location, "#")
	fragment, err := url.PathUnescape(fragment)
	if err != nil {
		return nil
	}
	var node any = s.Doc()
	for _, token := range strings.Split(strings.TrimPrefix(fragment, "/"), "/") {
		if token == "" {
			continue
		}
		token = strings.NewReplacer("~1", "/", "~0", "~").Replace(token)
		m, ok := node.(map[string]any)
		if !ok {
			return nil
		}
		node = m[token]
	}
	m, _ := node.(map[string]any)
	return m
}

// typeName words a JSON Schema type for a sentence.
func typeName(t string) string {
	switch t {
	case "object":
		return "a JSON object"
	case "array":
		return "an array"
	case "integer":
		return "an integer"
	case "null":
		return "null"
	default: // string, number, boolean
		return "a " + t
	}
}

// jsonText renders a JSON value as it would be written in the arguments.
func jsonText(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
