package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/capstanhq/capstan/tool"
)

// ticketIn and ticketOut are the arguments and result of a tool of a
// ticket service capstan has never heard of.
type ticketIn struct {
	Project  string   `json:"project" jsonschema:"the project key, e.g. OPS"`
	Title    string   `json:"title"`
	Priority int      `json:"priority,omitempty"`
	Labels   []string `json:"labels,omitempty"`
}

type ticketOut struct {
	ID  string `json:"id"`
	URL string `json:"url"`
}

func createTicket(_ context.Context, call tool.Call, in ticketIn) (ticketOut, error) {
	if in.Title == "fail" {
		return ticketOut{}, tool.WithVerdict(errors.New("the service refused"), tool.VerdictFailed)
	}
	return ticketOut{ID: in.Project + "-1", URL: "https://tickets.example/" + in.Project + "-1?op=" + call.OperationID}, nil
}

func TestNewDerivesTheSchemaFromTheArgumentsType(t *testing.T) {
	t.Parallel()
	tk := tool.MustNew("tickets_create", tool.Unsafe, createTicket, tool.Description("Open a ticket."))
	doc := tk.Schema().Doc()
	if doc["type"] != "object" || doc["additionalProperties"] != false {
		t.Errorf("schema %v: want an object refusing fields it does not name", doc)
	}
	if req := fmt.Sprint(doc["required"]); req != "[project title]" {
		t.Errorf("required = %s, want [project title] (priority and labels are omitempty)", req)
	}
	props, _ := doc["properties"].(map[string]any)
	project, _ := props["project"].(map[string]any)
	if project["type"] != "string" || project["description"] != "the project key, e.g. OPS" {
		t.Errorf("properties.project = %v, want a string described by its jsonschema tag", project)
	}
	if prio, _ := props["priority"].(map[string]any); prio["type"] != "integer" {
		t.Errorf("properties.priority = %v, want an integer", prio)
	}
	if tk.Name() != "tickets_create" || tk.Class() != tool.Unsafe || tk.Description() != "Open a ticket." {
		t.Errorf("name %q class %q description %q", tk.Name(), tk.Class(), tk.Description())
	}
	// A field of any type takes any value, written {} as every provider
	// takes it.
	open := tool.MustNew("notes_post", tool.Unsafe, func(context.Context, tool.Call, struct {
		Meta any `json:"meta"`
	}) (string, error) {
		return "", nil
	})
	if meta := open.Schema().Doc()["properties"].(map[string]any)["meta"]; !reflect.DeepEqual(meta, map[string]any{}) {
		t.Errorf("properties.meta = %#v, want {}", meta)
	}
	// The model is shown exactly what calls are held to.
	spec := tool.NewRegistry(tk).Specs()[0]
	if !reflect.DeepEqual(spec.Parameters, doc) {
		t.Errorf("the registry shows %v, the schema is %v", spec.Parameters, doc)
	}
}

func TestNewRefusesInvalidArgumentsNamingTheField(t *testing.T) {
	t.Parallel()
	tk := tool.MustNew("tickets_create", tool.Unsafe, createTicket)
	for _, tc := range []struct{ args, says string }{
		{`{"project":"OPS"}`, `field "title" is required`},
		{`{"project":"OPS","title":"t","owner":"bob"}`, `field "owner" is not allowed`},
		{`{"project":"OPS","title":"t","Title":"u"}`, `field "Title" is not allowed`},
		{`{"project":"OPS","title":"t","priority":"high"}`, `field "priority" must be an integer, not a string`},
		{`{"project":"OPS","title":"t","priority":1.5}`, `field "priority" must be an integer`},
		{`{"project":"OPS","title":"t","labels":[1]}`, `field "labels.0" must be a string`},
		{`{"project":"OPS","title":"t","priority":2.0}`, `field "priority" cannot be read as int`}, // an integer to the schema, not to Go
		{`[]`, `the arguments must be a JSON object`},
		{``, `there are none`},
	} {
		_, err := tk.Identify(json.RawMessage(tc.args))
		if !errors.Is(err, tool.ErrInvalidArguments) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Identify(%s) = %v, want ErrInvalidArguments saying %q", tc.args, err, tc.says)
		}
		_, xerr := tk.Execute(context.Background(), tool.Call{OperationID: "op", Arguments: json.RawMessage(tc.args)})
		if !errors.Is(xerr, tool.ErrInvalidArguments) || tool.Classify(xerr) != tool.VerdictFailed {
			t.Errorf("Execute(%s) = %v, want ErrInvalidArguments, failed", tc.args, xerr)
		}
	}
}

func TestNewIdentifyIsDeterministic(t *testing.T) {
	t.Parallel()
	plain := tool.MustNew("tickets_create", tool.Unsafe, createTicket)
	keyed := tool.MustNew("tickets_create", tool.Unsafe, createTicket,
		tool.BusinessKey(func(in ticketIn) string { return "ticket:" + in.Project + ":" + in.Title }),
		tool.EffectOf(func(in ticketIn) any { return map[string]string{"title": in.Title, "project": in.Project} }))
	a := json.RawMessage(`{"project":"OPS","title":"disk full","priority":2,"labels":["db","p1"]}`)
	b := json.RawMessage(" {\"labels\": [\"db\",\"p1\"], \"priority\": 2,\n \"title\":\"disk full\", \"project\":\"OPS\"} ")
	other := json.RawMessage(`{"project":"OPS","title":"disk full","priority":3}`)
	for _, tc := range []struct {
		name       string
		tk         tool.Tool
		key        string
		effect     string
		otherEqual bool // another priority is the same effect
	}{
		{"all of the arguments", plain, "", `{"labels":["db","p1"],"priority":2,"project":"OPS","title":"disk full"}`, false},
		{"BusinessKey and EffectOf", keyed, "ticket:OPS:disk full", `{"project":"OPS","title":"disk full"}`, true},
	} {
		ia, err := tc.tk.Identify(a)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		ib, _ := tc.tk.Identify(b)
		io, _ := tc.tk.Identify(other)
		if !reflect.DeepEqual(ia, ib) || ia.BusinessKey != tc.key || string(ia.Effect) != tc.effect {
			t.Errorf("%s: Identify = %q %s and %q %s; want %q %s for both", tc.name, ia.BusinessKey, ia.Effect, ib.BusinessKey, ib.Effect, tc.key, tc.effect)
		}
		if reflect.DeepEqual(ia, io) != tc.otherEqual {
			t.Errorf("%s: another priority gives %s (same effect: %v), want same: %v", tc.name, io.Effect, reflect.DeepEqual(ia, io), tc.otherEqual)
		}
	}
}

func TestNewExecuteDecodesCallsAndEncodes(t *testing.T) {
	t.Parallel()
	tk := tool.MustNew("tickets_create", tool.Unsafe, createTicket, tool.ExternalID(func(out ticketOut) string { return out.URL }))
	res, err := tk.Execute(context.Background(), tool.Call{OperationID: "d:T:1", Arguments: json.RawMessage(`{"project":"OPS","title":"t"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Output) != `{"id":"OPS-1","url":"https://tickets.example/OPS-1?op=d:T:1"}` || res.ExternalID != "https://tickets.example/OPS-1?op=d:T:1" {
		t.Errorf("Execute = %s %q; want the encoded result, the URL its external id", res.Output, res.ExternalID)
	}
	_, err = tk.Execute(context.Background(), tool.Call{OperationID: "d:T:2", Arguments: json.RawMessage(`{"project":"OPS","title":"fail"}`)})
	if err == nil || tool.Classify(err) != tool.VerdictFailed {
		t.Errorf("a refusal of the function = %v (%s), want its own verdict, failed", err, tool.Classify(err))
	}
}

func TestNewSummary(t *testing.T) {
	t.Parallel()
	args := json.RawMessage(`{"project":"OPS","title":"disk\nfull"}`)
	key := tool.BusinessKey(func(in ticketIn) string { return in.Project })
	long := tool.Summary(func(in ticketIn) string { return strings.Repeat("x", 300) })
	for _, tc := range []struct {
		name string
		opts []tool.Option
		args json.RawMessage
		want string
	}{
		{"default", nil, args, "tickets_create"},
		{"with a business key", []tool.Option{key}, args, "tickets_create OPS"},
		{"Summary, on one line", []tool.Option{tool.Summary(func(in ticketIn) string { return "ticket in " + in.Project + ": " + in.Title })},
			args, "ticket in OPS: disk full"},
		{"cut", []tool.Option{long}, args, strings.Repeat("x", 199) + "…"},
		{"invalid arguments", []tool.Option{key}, json.RawMessage(`{}`), "tickets_create"},
	} {
		if got := tool.MustNew("tickets_create", tool.Unsafe, createTicket, tc.opts...).Summary(tc.args); got != tc.want {
			t.Errorf("%s: Summary = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// sideOptions give each optional side, in the order of its interface in
// sideInterfaces.
var sideOptions = []tool.Option{
	tool.Lookup(func(context.Context, tool.Sent, ticketIn) (tool.Observation, error) {
		return tool.Observation{Outcome: tool.NotSeen}, nil
	}),
	tool.Verify(func(context.Context, tool.Call, ticketIn) (ticketOut, bool, error) {
		return ticketOut{ID: "X-1"}, true, nil
	}),
	tool.Breaker("tickets/write"),
	tool.Targets(func(in ticketIn) tool.Target {
		return tool.Target{Attributes: map[string]string{"project": in.Project}}
	}),
	tool.Prepare(func(context.Context, tool.Call, ticketIn) (json.RawMessage, error) {
		return json.RawMessage(`{"seq":7}`), nil
	}),
	tool.ApprovalText(func(in ticketIn) string { return "open a ticket in " + in.Project }),
}

var sideInterfaces = []struct {
	name string
	is   func(tool.Tool) bool
}{
	{"Finder", func(t tool.Tool) bool { _, ok := t.(tool.Finder); return ok }},
	{"Verifier", func(t tool.Tool) bool { _, ok := t.(tool.Verifier); return ok }},
	{"Guarded", func(t tool.Tool) bool { _, ok := t.(tool.Guarded); return ok }},
	{"Targeted", func(t tool.Tool) bool { _, ok := t.(tool.Targeted); return ok }},
	{"Preparer", func(t tool.Tool) bool { _, ok := t.(tool.Preparer); return ok }},
	{"ApprovalTexter", func(t tool.Tool) bool { _, ok := t.(tool.ApprovalTexter); return ok }},
}

// Every combination of options gives exactly the sides asked for: the
// activities and the reconcilers test for them with type assertions.
func TestNewImplementsASideOnlyWhenItsOptionIsGiven(t *testing.T) {
	t.Parallel()
	args := json.RawMessage(`{"project":"OPS","title":"t"}`)
	for mask := range 1 << len(sideOptions) {
		var opts []tool.Option
		for i, o := range sideOptions {
			if mask&(1<<i) != 0 {
				opts = append(opts, o)
			}
		}
		tk, err := tool.New("tickets_update", tool.Idempotent, createTicket, opts...)
		if err != nil {
			t.Fatalf("%06b: %v", mask, err)
		}
		for i, side := range sideInterfaces {
			if want := mask&(1<<i) != 0; side.is(tk) != want {
				t.Errorf("options %06b: the tool is a %s: %v, want %v", mask, side.name, side.is(tk), want)
			}
		}
	}
	// Each side answers through its option.
	tk := tool.MustNew("tickets_update", tool.Idempotent, createTicket, sideOptions...)
	ctx := context.Background()
	call := tool.Call{OperationID: "d:T:1", Arguments: args}
	if res, landed, err := tk.(tool.Verifier).Verify(ctx, call); err != nil || !landed || string(res.Output) != `{"id":"X-1","url":""}` {
		t.Errorf("Verify = %s %v %v", res.Output, landed, err)
	}
	if got := tk.(tool.Guarded).Breaker(); got != "tickets/write" {
		t.Errorf("Breaker = %q", got)
	}
	if tg, err := tk.(tool.Targeted).Target(args); err != nil || tg.Attributes["project"] != "OPS" {
		t.Errorf("Target = %+v, %v", tg, err)
	}
	if _, err := tk.(tool.Targeted).Target(json.RawMessage(`{}`)); !errors.Is(err, tool.ErrInvalidArguments) {
		t.Errorf("Target of invalid arguments: %v", err)
	}
	if facts, err := tk.(tool.Preparer).Prepare(ctx, call); err != nil || string(facts) != `{"seq":7}` {
		t.Errorf("Prepare = %s, %v", facts, err)
	}
	if got := tk.(tool.ApprovalTexter).ApprovalText(args); got != "open a ticket in OPS" {
		t.Errorf("ApprovalText = %q", got)
	}
	if got := tk.(tool.ApprovalTexter).ApprovalText(json.RawMessage(`{}`)); got != "" {
		t.Errorf("ApprovalText of invalid arguments = %q, want \"\"", got)
	}
}

// A lookup's effect reads back a URL only when ReadBackURL was given, and
// names what it looks for by LookupKey, or by the tool and operation id.
func TestNewLookupEffect(t *testing.T) {
	t.Parallel()
	find := tool.Lookup(func(_ context.Context, s tool.Sent, in ticketIn) (tool.Observation, error) {
		return tool.Observation{Outcome: tool.Found, ExternalID: in.Project + "-9", Detail: "found by " + s.OperationID}, nil
	})
	read := tool.ReadBackURL(func(_ context.Context, _ tool.Sent, in ticketIn, url string) (tool.Observation, error) {
		if !strings.HasSuffix(url, "/"+in.Project+"-9") {
			return tool.Observation{Outcome: tool.NotSeen, Detail: url + " is not a ticket of " + in.Project}, nil
		}
		return tool.Observation{Outcome: tool.Found, ExternalID: in.Project + "-9"}, nil
	})
	key := tool.LookupKey(func(in ticketIn) string { return "a ticket in " + in.Project + " carrying the operation id" })
	sent := tool.Sent{Call: tool.Call{OperationID: "d:T:1", Arguments: json.RawMessage(`{"project":"OPS","title":"t"}`)}}
	for _, tc := range []struct {
		name     string
		opts     []tool.Option
		key      string
		readBack bool
	}{
		{"Lookup", []tool.Option{find}, "the effect of tickets_create operation d:T:1", false},
		{"with LookupKey and ReadBackURL", []tool.Option{find, key, read}, "a ticket in OPS carrying the operation id", true},
	} {
		tk := tool.MustNew("tickets_create", tool.Unsafe, createTicket, tc.opts...)
		e, err := tk.(tool.Finder).Effect(sent)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		obs, err := e.Find(context.Background())
		if err != nil || obs.Outcome != tool.Found || obs.ExternalID != "OPS-9" || obs.Detail != "found by d:T:1" {
			t.Errorf("%s: Find = %+v, %v", tc.name, obs, err)
		}
		if e.Key() != tc.key {
			t.Errorf("%s: Key = %q, want %q", tc.name, e.Key(), tc.key)
		}
		rb, ok := e.(tool.ReadBack)
		if ok != tc.readBack {
			t.Fatalf("%s: the effect is a ReadBack: %v, want %v", tc.name, ok, tc.readBack)
		}
		if ok {
			if obs, err := rb.ReadBack(context.Background(), "https://tickets.example/DEV-9"); err != nil || obs.Outcome != tool.NotSeen {
				t.Errorf("%s: ReadBack of another project's ticket = %+v, %v", tc.name, obs, err)
			}
		}
		if _, err := tk.(tool.Finder).Effect(tool.Sent{Call: tool.Call{Arguments: sent.Arguments}}); err == nil {
			t.Errorf("%s: an effect without an operation id", tc.name)
		}
		if _, err := tk.(tool.Finder).Effect(tool.Sent{Call: tool.Call{OperationID: "x", Arguments: json.RawMessage(`{}`)}}); !errors.Is(err, tool.ErrInvalidArguments) {
			t.Errorf("%s: an effect of invalid arguments: %v", tc.name, err)
		}
	}
}

func TestNewRefusesWhatCannotWork(t *testing.T) {
	t.Parallel()
	find := tool.Lookup(func(context.Context, tool.Sent, ticketIn) (tool.Observation, error) { return tool.Observation{}, nil })
	type other struct{ X string }
	var nilKey func(ticketIn) string
	for _, tc := range []struct {
		name string
		make func() (tool.Tool, error)
		says string
	}{
		{"a name with a space", func() (tool.Tool, error) { return tool.New("tickets create", tool.Unsafe, createTicket) },
			`tool "tickets create": a tool's name must be 1 to 64 letters, digits, _ or -`},
		{"an empty name", func() (tool.Tool, error) { return tool.New("", tool.Unsafe, createTicket) }, `tool "": a tool's name must be`},
		{"a name too long", func() (tool.Tool, error) { return tool.New(strings.Repeat("t", 65), tool.Unsafe, createTicket) }, "1 to 64"},
		{"an MCP name", func() (tool.Tool, error) { return tool.New("mcp__tickets__create", tool.Unsafe, createTicket) }, "are those of MCP tools"},
		{"a built-in tool's name", func() (tool.Tool, error) { return tool.New("github_merge", tool.Unsafe, createTicket) }, "built-in GitHub tools"},
		{"a class that is none", func() (tool.Tool, error) { return tool.New("tickets_create", tool.Class("safe"), createTicket) },
			`tool tickets_create: class "safe" is none of read_only, idempotent, conditional, unsafe`},
		{"no function", func() (tool.Tool, error) { return tool.New[ticketIn, ticketOut]("tickets_create", tool.Unsafe, nil) }, "its function is nil"},
		{"arguments that are no object", func() (tool.Tool, error) {
			return tool.New("tickets_create", tool.Unsafe, func(context.Context, tool.Call, string) (string, error) { return "", nil })
		}, "its arguments type string is not a struct"},
		{"arguments with no schema", func() (tool.Tool, error) {
			return tool.New("tickets_create", tool.Unsafe, func(context.Context, tool.Call, struct{ F func() }) (string, error) { return "", nil })
		}, "no JSON Schema can be derived from its arguments type"},
		{"a result that cannot be encoded", func() (tool.Tool, error) {
			return tool.New("tickets_create", tool.Unsafe, func(context.Context, tool.Call, ticketIn) (chan int, error) { return nil, nil })
		}, "its result type chan int cannot be encoded as JSON"},
		{"an option of another arguments type", func() (tool.Tool, error) {
			return tool.New("tickets_create", tool.Unsafe, createTicket, tool.BusinessKey(func(o other) string { return o.X }))
		}, "BusinessKey was given a func(tool_test.other) string, which does not fit a tool whose arguments are tool_test.ticketIn"},
		{"an option given twice", func() (tool.Tool, error) {
			return tool.New("tickets_create", tool.Unsafe, createTicket, tool.Breaker("a/b"), tool.Breaker("c/d"))
		}, "Breaker is given twice"},
		{"a nil function", func() (tool.Tool, error) {
			return tool.New("tickets_create", tool.Unsafe, createTicket, tool.BusinessKey(nilKey))
		},
			"BusinessKey was given a nil function"},
		{"a zero option", func() (tool.Tool, error) { return tool.New("tickets_create", tool.Unsafe, createTicket, tool.Option{}) }, "zero value"},
		{"an empty breaker", func() (tool.Tool, error) {
			return tool.New("tickets_create", tool.Unsafe, createTicket, tool.Breaker(""))
		}, "one word"},
		{"Verify on an unsafe tool", func() (tool.Tool, error) {
			return tool.New("tickets_create", tool.Unsafe, createTicket, tool.Verify(func(context.Context, tool.Call, ticketIn) (ticketOut, bool, error) {
				return ticketOut{}, false, nil
			}))
		}, "Verify is asked only of an idempotent tool, and this one is unsafe"},
		{"Lookup on a read-only tool", func() (tool.Tool, error) { return tool.New("tickets_get", tool.ReadOnly, createTicket, find) },
			"a read_only tool has no effect to look up"},
		{"LookupKey without Lookup", func() (tool.Tool, error) {
			return tool.New("tickets_create", tool.Unsafe, createTicket, tool.LookupKey(func(ticketIn) string { return "" }))
		}, "there is no Lookup"},
		{"ReadBackURL without Lookup", func() (tool.Tool, error) {
			return tool.New("tickets_create", tool.Unsafe, createTicket, tool.ReadBackURL(func(context.Context, tool.Sent, ticketIn, string) (tool.Observation, error) {
				return tool.Observation{}, nil
			}))
		}, "there is no Lookup"},
	} {
		tk, err := tc.make()
		if err == nil || !strings.Contains(err.Error(), tc.says) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: New = %v, %v; want one sentence saying %q", tc.name, tk, err, tc.says)
		}
	}
	// An unsafe tool without a lookup is allowed: a person settles its
	// unknown outcomes.
	tk, err := tool.New("tickets_create", tool.Unsafe, createTicket)
	if _, finder := tk.(tool.Finder); err != nil || finder {
		t.Errorf("an unsafe tool without Lookup: %v, %v; want a tool that is no Finder", tk, err)
	}
	defer func() {
		if recover() == nil {
			t.Error("MustNew of a bad name did not panic")
		}
	}()
	tool.MustNew("", tool.Unsafe, createTicket)
}
