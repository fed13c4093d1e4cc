package tool_test

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/capstanhq/capstan/tool"
)

// A tool of your own: open a ticket. It is unsafe (a second call would open
// a second ticket), so it puts the operation id in its request and looks
// the ticket up by it when the answer was lost.
func ExampleNew() {
	type ticket struct {
		Project string `json:"project" jsonschema:"the project key, e.g. OPS"`
		Title   string `json:"title"`
		Body    string `json:"body,omitempty"`
	}
	type created struct {
		Key string `json:"key"`
	}
	tickets := map[string]string{} // operation id → ticket key: the service
	create, err := tool.New("tickets_create", tool.Unsafe,
		func(ctx context.Context, call tool.Call, in ticket) (created, error) {
			key := fmt.Sprintf("%s-%d", in.Project, len(tickets)+1)
			tickets[call.OperationID] = key // the service keeps the id with the ticket
			return created{Key: key}, nil
		},
		tool.Description("Open a ticket in a project."),
		tool.BusinessKey(func(in ticket) string { return "ticket:" + in.Project + ":" + in.Title }),
		tool.Summary(func(in ticket) string { return "ticket in " + in.Project + ": " + in.Title }),
		tool.ExternalID(func(out created) string { return out.Key }),
		tool.Lookup(func(ctx context.Context, s tool.Sent, in ticket) (tool.Observation, error) {
			if key, ok := tickets[s.OperationID]; ok {
				return tool.Observation{Outcome: tool.Found, ExternalID: key, Detail: key + " carries the operation id"}, nil
			}
			return tool.Observation{Outcome: tool.NotSeen, Detail: "no ticket carries the operation id"}, nil
		}),
		tool.Targets(func(in ticket) tool.Target {
			return tool.Target{Attributes: map[string]string{"project": in.Project}}
		}),
	)
	if err != nil {
		panic(err)
	}
	args := json.RawMessage(`{"project":"OPS","title":"disk full on db-3"}`)

	fmt.Println("required:", create.Schema().Doc()["required"])
	id, _ := create.Identify(args)
	fmt.Println("business key:", id.BusinessKey)
	fmt.Println("summary:", create.Summary(args))
	_, err = create.Identify(json.RawMessage(`{"project":"OPS","title":"x","owner":"bob"}`))
	fmt.Println(err)

	res, _ := create.Execute(context.Background(), tool.Call{OperationID: "acme:T1:t1:tickets_create:1", Arguments: args})
	fmt.Println("output:", string(res.Output), "external id:", res.ExternalID)
	effect, _ := create.(tool.Finder).Effect(tool.Sent{Call: tool.Call{OperationID: "acme:T1:t1:tickets_create:1", Arguments: args}})
	obs, _ := effect.Find(context.Background())
	fmt.Println("lookup:", obs.Outcome, obs.ExternalID)
	// Output:
	// required: [project title]
	// business key: ticket:OPS:disk full on db-3
	// summary: ticket in OPS: disk full on db-3
	// invalid tool arguments: field "owner" is not allowed; the allowed fields are "body", "project", "title"
	// output: {"key":"OPS-1"} external id: OPS-1
	// lookup: found OPS-1
}
