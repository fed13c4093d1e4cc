package tool

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"unicode/utf8"

	"github.com/google/jsonschema-go/jsonschema"
)

// New makes a Tool named name, of safety class class, whose calls run fn
// once each. The JSON Schema of its arguments is derived from In (a struct,
// whose fields are properties by their json names, required unless
// omitempty or omitzero, described by a `jsonschema:"…"` tag; any field
// the struct does not name is refused), and compiled with NewSchema: the
// schema a model is shown is the one every call is validated against
// before it is decoded into In. fn's Out is encoded as JSON for the model
// (Result.Output).
//
// Without options, Identify gives no business key and the canonical JSON
// of the decoded arguments as the effect; Summary is the name. Each option
// gives the tool one side more (see Option); a side capstan tests for
// (Finder, Verifier, Guarded, Targeted, Preparer, ApprovalTexter, and
// ReadBack on the effects) is implemented only when its option is given.
//
// name is what the model calls the tool: 1 to 64 letters, digits, _ and -,
// not starting with "mcp__" (the names of MCP tools) nor "github_" (the
// built-in tools'). Its first word, up to
// the first _, names the breaker its calls go through unless Breaker says
// otherwise. New's error is one sentence naming what is wrong.
func New[In, Out any](name string, class Class, fn func(ctx context.Context, call Call, in In) (Out, error), opts ...Option) (Tool, error) {
	c, err := newCore[In, Out](name, class, fn, opts)
	if err != nil {
		return nil, err
	}
	return c.withSides(), nil
}

// MustNew is New for a tool that is a constant of the program, where an
// error is a programming error: it panics.
func MustNew[In, Out any](name string, class Class, fn func(ctx context.Context, call Call, in In) (Out, error), opts ...Option) Tool {
	t, err := New(name, class, fn, opts...)
	if err != nil {
		panic(err)
	}
	return t
}

// validName is a tool name every model provider takes.
var validName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// mcpPrefix starts the name of every MCP tool (internal/mcp), and
// builtinPrefix that of every built-in tool (internal/policy.BuiltinPrefix,
// which the starter checks names under against the built-in tools).
const (
	mcpPrefix     = "mcp__"
	builtinPrefix = "github_"
)

// core is a tool made by New, without its optional sides: withSides wraps
// it in the type that has exactly the sides its options asked for.
type core[In, Out any] struct {
	name, description string
	class             Class
	schema            *Schema
	fn                func(context.Context, Call, In) (Out, error)

	businessKey func(In) string
	effectOf    func(In) any
	summary     func(In) string
	externalID  func(Out) string
	lookup      func(context.Context, Sent, In) (Observation, error)
	lookupKey   func(In) string
	readBack    func(context.Context, Sent, In, string) (Observation, error)
	breaker     string
	approval    func(In) string
	targets     func(In) Target
	verify      func(context.Context, Call, In) (Out, bool, error)
	prepare     func(context.Context, Call, In) (json.RawMessage, error)
}

// newCore checks what New was given and compiles the schema.
func newCore[In, Out any](name string, class Class, fn func(context.Context, Call, In) (Out, error), opts []Option) (*core[In, Out], error) {
	switch {
	case !validName.MatchString(name):
		return nil, fmt.Errorf("tool %q: a tool's name must be 1 to 64 letters, digits, _ or -, as every model provider takes it", name)
	case strings.HasPrefix(name, mcpPrefix):
		return nil, fmt.Errorf("tool %q: names starting with %q are those of MCP tools; name the tool otherwise", name, mcpPrefix)
	case strings.HasPrefix(name, builtinPrefix):
		return nil, fmt.Errorf("tool %q: names starting with %q are those of capstan's built-in GitHub tools; name the tool otherwise", name, builtinPrefix)
	}
	switch class {
	case ReadOnly, Idempotent, Conditional, Unsafe:
	default:
		return nil, fmt.Errorf("tool %s: class %q is none of %s, %s, %s, %s", name, class, ReadOnly, Idempotent, Conditional, Unsafe)
	}
	if fn == nil {
		return nil, fmt.Errorf("tool %s: its function is nil", name)
	}
	c := &core[In, Out]{name: name, class: class, fn: fn}
	var err error
	if c.schema, err = schemaFor[In](); err != nil {
		return nil, fmt.Errorf("tool %s: %w", name, err)
	}
	var zero Out
	if _, err := json.Marshal(zero); err != nil {
		return nil, fmt.Errorf("tool %s: its result type %s cannot be encoded as JSON: %v", name, goTypeName[Out](), err)
	}
	if err := c.apply(opts); err != nil {
		return nil, fmt.Errorf("tool %s: %w", name, err)
	}
	return c, nil
}

// schemaFor is the compiled schema of an arguments object decoded into In.
func schemaFor[In any]() (*Schema, error) {
	derived, err := jsonschema.For[In](nil)
	if err != nil {
		return nil, fmt.Errorf("no JSON Schema can be derived from its arguments type %s: %v", goTypeName[In](), err)
	}
	if derived.Type != "object" {
		return nil, fmt.Errorf("its arguments type %s is not a struct (nor a map with string keys), but a call's arguments are a JSON object", goTypeName[In]())
	}
	raw, err := json.Marshal(derived)
	if err != nil {
		return nil, fmt.Errorf("encode the schema of %s: %v", goTypeName[In](), err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("decode the schema of %s: %v", goTypeName[In](), err)
	}
	openSchemas(doc)
	return NewSchema(doc)
}

// openSchemas writes the schema of a value of any type (an interface
// field), which jsonschema-go encodes as true, as {}: the same schema, in
// the form every model provider takes.
func openSchemas(node map[string]any) {
	open := func(v any) any {
		if v == true {
			return map[string]any{}
		}
		if m, ok := v.(map[string]any); ok {
			openSchemas(m)
		}
		return v
	}
	if props, ok := node["properties"].(map[string]any); ok {
		for k, v := range props {
			props[k] = open(v)
		}
	}
	for _, k := range []string{"items", "additionalProperties"} {
		if v, ok := node[k]; ok {
			node[k] = open(v)
		}
	}
}

// apply sets the options on c, each checked against In and Out.
func (c *core[In, Out]) apply(opts []Option) error {
	seen := map[string]bool{}
	for _, o := range opts {
		if o.name == "" {
			return errors.New("an Option is its zero value; make options with the functions of package tool")
		}
		if seen[o.name] {
			return fmt.Errorf("%s is given twice", o.name)
		}
		seen[o.name] = true
		if err := c.set(o); err != nil {
			return err
		}
	}
	switch {
	case c.verify != nil && c.class != Idempotent:
		return fmt.Errorf("Verify is asked only of an idempotent tool, and this one is %s (give it a Lookup instead)", c.class)
	case c.lookup != nil && c.class == ReadOnly:
		return errors.New("a read_only tool has no effect to look up, so it takes no Lookup")
	case c.lookupKey != nil && c.lookup == nil:
		return errors.New("LookupKey names what Lookup looks for, and there is no Lookup")
	case c.readBack != nil && c.lookup == nil:
		return errors.New("ReadBackURL reads back an effect Lookup finds, and there is no Lookup")
	}
	return nil
}

// set sets one option, or says why its value does not fit the tool.
func (c *core[In, Out]) set(o Option) error {
	ok := true
	switch o.name {
	case "Description":
		c.description, ok = o.value.(string)
	case "Breaker":
		c.breaker, ok = o.value.(string)
		if ok && (c.breaker == "" || strings.ContainsAny(c.breaker, " \t\n")) {
			return fmt.Errorf("Breaker(%q): a breaker's key is one word, such as \"tickets/write\"", c.breaker)
		}
	case "BusinessKey":
		c.businessKey, ok = o.value.(func(In) string)
	case "EffectOf":
		c.effectOf, ok = o.value.(func(In) any)
	case "Summary":
		c.summary, ok = o.value.(func(In) string)
	case "ApprovalText":
		c.approval, ok = o.value.(func(In) string)
	case "LookupKey":
		c.lookupKey, ok = o.value.(func(In) string)
	case "Targets":
		c.targets, ok = o.value.(func(In) Target)
	case "ExternalID":
		c.externalID, ok = o.value.(func(Out) string)
	case "Lookup":
		c.lookup, ok = o.value.(func(context.Context, Sent, In) (Observation, error))
	case "ReadBackURL":
		c.readBack, ok = o.value.(func(context.Context, Sent, In, string) (Observation, error))
	case "Verify":
		c.verify, ok = o.value.(func(context.Context, Call, In) (Out, bool, error))
	case "Prepare":
		c.prepare, ok = o.value.(func(context.Context, Call, In) (json.RawMessage, error))
	default:
		return fmt.Errorf("unknown option %q", o.name)
	}
	switch {
	case !ok:
		return fmt.Errorf("%s was given a %T, which does not fit a tool whose arguments are %s and whose result is %s",
			o.name, o.value, goTypeName[In](), goTypeName[Out]())
	case reflect.ValueOf(o.value).Kind() == reflect.Func && reflect.ValueOf(o.value).IsNil():
		return fmt.Errorf("%s was given a nil function", o.name)
	}
	return nil
}

// goTypeName names T for an error.
func goTypeName[T any]() string { return reflect.TypeFor[T]().String() }

// Name is the tool's name, as the model calls it.
func (c *core[In, Out]) Name() string { return c.name }

// Description is what the model is told the tool does.
func (c *core[In, Out]) Description() string { return c.description }

// Schema is the compiled schema derived from In.
func (c *core[In, Out]) Schema() *Schema { return c.schema }

// Class is the tool's safety class.
func (c *core[In, Out]) Class() Class { return c.class }

// parse is the tool's one parser of its arguments: the schema, then In.
func (c *core[In, Out]) parse(args json.RawMessage) (In, error) {
	var in In
	if err := c.schema.Validate(args); err != nil {
		return in, err
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return in, fmt.Errorf("%w: field %q cannot be read as %s", ErrInvalidArguments, typeErr.Field, typeErr.Type)
		}
		return in, fmt.Errorf("%w: the arguments cannot be read: %v", ErrInvalidArguments, err)
	}
	return in, nil
}

// Identify validates args and names their effect: the business key of
// BusinessKey, and the canonical JSON of EffectOf's fields or of all of
// the arguments.
func (c *core[In, Out]) Identify(args json.RawMessage) (Identity, error) {
	in, err := c.parse(args)
	if err != nil {
		return Identity{}, err
	}
	var id Identity
	if c.businessKey != nil {
		id.BusinessKey = c.businessKey(in)
	}
	var effect any = in
	if c.effectOf != nil {
		effect = c.effectOf(in)
	}
	if id.Effect, err = canonicalJSON(effect); err != nil {
		return Identity{}, fmt.Errorf("tool %s: encode the effect of a call: %w", c.name, err)
	}
	return id, nil
}

// Summary is Summary's line, or the name (and business key).
func (c *core[In, Out]) Summary(args json.RawMessage) string {
	in, err := c.parse(args)
	switch {
	case err != nil:
		return c.name
	case c.summary != nil:
		return oneLine(c.summary(in))
	case c.businessKey != nil:
		return oneLine(c.name + " " + c.businessKey(in))
	default:
		return c.name
	}
}

// Execute decodes the arguments, runs the function once and encodes its
// result.
func (c *core[In, Out]) Execute(ctx context.Context, call Call) (Result, error) {
	in, err := c.parse(call.Arguments)
	if err != nil {
		return Result{}, err
	}
	out, err := c.fn(ctx, call, in)
	if err != nil {
		return Result{}, err
	}
	return c.result(out), nil
}

// result is what a call that returned out produced. The call acted, so
// an output that does not encode is said to the model, not an error.
func (c *core[In, Out]) result(out Out) Result {
	var res Result
	if c.externalID != nil {
		res.ExternalID = c.externalID(out)
	}
	var err error
	if res.Output, err = json.Marshal(out); err != nil {
		res.Output, _ = json.Marshal(map[string]string{"note": "the call succeeded, but its result could not be encoded as JSON: " + err.Error()})
	}
	return res
}

// canonicalJSON encodes v with its object keys sorted at every level and
// its numbers as written, so that the same value always gives the same
// bytes.
func canonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return nil, err
	}
	return json.Marshal(generic)
}

// maxLine is the longest summary or approval text, in characters.
const maxLine = 200

// oneLine is s on one line, cut to maxLine characters.
func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= maxLine {
		return s
	}
	r := []rune(s)
	return string(r[:maxLine-1]) + "…"
}
