package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/capstanhq/capstan/tool"
)

// ticketTool is a program's own tool as a test writes one: it files a
// ticket in memory and remembers each call, with the operation id capstan
// gave it, so a test can count how often the effect happened.
type ticketTool struct {
	name   string
	schema *tool.Schema

	// fail, when set, is what every call returns after it reached the
	// (pretend) service: a service that is down.
	fail error

	mu    sync.Mutex
	calls []ticketCall
}

// ticketCall is one Execute of a ticketTool.
type ticketCall struct {
	OperationID, Title string
}

type ticketArgs struct {
	Title string `json:"title"`
}

func newTicketTool(name string) *ticketTool {
	return &ticketTool{name: name, schema: tool.MustSchema(map[string]any{
		"type":                 "object",
		"properties":           map[string]any{"title": map[string]any{"type": "string", "minLength": 1}},
		"required":             []any{"title"},
		"additionalProperties": false,
	})}
}

func (t *ticketTool) Name() string         { return t.name }
func (t *ticketTool) Description() string  { return "Files a ticket with a title." }
func (t *ticketTool) Schema() *tool.Schema { return t.schema }
func (t *ticketTool) Class() tool.Class    { return tool.Unsafe }

func (t *ticketTool) parse(args json.RawMessage) (ticketArgs, error) {
	var a ticketArgs
	if err := t.schema.Validate(args); err != nil {
		return a, fmt.Errorf("%w: %v", tool.ErrInvalidArguments, err)
	}
	err := json.Unmarshal(args, &a)
	return a, err
}

func (t *ticketTool) Identify(args json.RawMessage) (tool.Identity, error) {
	a, err := t.parse(args)
	if err != nil {
		return tool.Identity{}, err
	}
	effect, _ := json.Marshal(a)
	return tool.Identity{Effect: effect}, nil
}

func (t *ticketTool) Summary(args json.RawMessage) string {
	a, _ := t.parse(args)
	return t.name + " " + a.Title
}

func (t *ticketTool) Execute(_ context.Context, call tool.Call) (tool.Result, error) {
	a, err := t.parse(call.Arguments)
	if err != nil {
		return tool.Result{}, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.calls = append(t.calls, ticketCall{OperationID: call.OperationID, Title: a.Title})
	if t.fail != nil {
		return tool.Result{}, t.fail
	}
	id := fmt.Sprintf("T-%d", len(t.calls))
	out, _ := json.Marshal(map[string]string{"id": id})
	return tool.Result{Output: out, ExternalID: id}, nil
}

// Calls returns the calls made so far.
func (t *ticketTool) Calls() []ticketCall {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]ticketCall(nil), t.calls...)
}
