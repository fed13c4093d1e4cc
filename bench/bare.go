package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/slack-go/slack"
	"go.temporal.io/sdk/workflow"

	"github.com/capstanhq/capstan/internal/model"
	"github.com/capstanhq/capstan/tool"
)

// The bare task: capstan's task shape written as a plain Temporal workflow,
// the way one would without capstan. It makes the same HTTP calls (the same
// streaming model request, the same GitHub tools, the same Slack post,
// through the same clients) and nothing else: no ledger, no turn guard, no
// claims, leases or heartbeats, no reconciliation, no journal or search
// attributes. The transcript travels in activity inputs and results, and
// every activity takes Temporal's default retry policy. The ratio of
// capstan's figures to these is what capstan costs.

// BareInput starts a bare task.
type BareInput struct {
	TaskID       string
	Prompt       string
	Repo         string
	Base         string
	SlackChannel string
	Model        string // provider:model
	MaxTurns     int
}

// BareResult is how a bare task ended.
type BareResult struct {
	Turns     int
	Text      string
	Delivered string // channel/ts of the Slack message
}

// BareModelTurnInput is one model request with the whole transcript.
type BareModelTurnInput struct {
	Model    string
	Messages []model.Message
}

// BareToolInput is one tool call.
type BareToolInput struct {
	OperationID string
	Call        model.ToolCall
}

// BareDeliverInput posts the final answer.
type BareDeliverInput struct {
	Channel string
	Text    string
}

// bare is the nil receiver through which BareTask names its activities.
var bare *bareActivities

// BareTask runs turns until the model answers without tool calls, runs each
// turn's tool calls in parallel, then posts the answer to Slack.
func BareTask(ctx workflow.Context, in BareInput) (BareResult, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 2 * time.Minute})
	msgs := []model.Message{
		{Role: model.RoleSystem, Content: bareSystemPrompt(in)},
		{Role: model.RoleUser, Content: in.Prompt},
	}
	var res BareResult
	for turn := 1; turn <= in.MaxTurns; turn++ {
		var out model.Message
		if err := workflow.ExecuteActivity(ctx, bare.BareModelTurn, BareModelTurnInput{Model: in.Model, Messages: msgs}).Get(ctx, &out); err != nil {
			return res, err
		}
		res.Turns = turn
		msgs = append(msgs, out)
		if len(out.ToolCalls) == 0 {
			res.Text = out.Content
			break
		}
		futures := make([]workflow.Future, len(out.ToolCalls))
		for i, call := range out.ToolCalls {
			futures[i] = workflow.ExecuteActivity(ctx, bare.BareTool, BareToolInput{
				OperationID: fmt.Sprintf("%s:t%d:%d", in.TaskID, turn, i+1), Call: call})
		}
		for i, f := range futures {
			var content string
			if err := f.Get(ctx, &content); err != nil {
				return res, err
			}
			msgs = append(msgs, model.Message{Role: model.RoleTool, ToolCallID: out.ToolCalls[i].ID, Content: content})
		}
	}
	if res.Text == "" {
		return res, fmt.Errorf("no final answer after %d turns", in.MaxTurns)
	}
	if in.SlackChannel != "" {
		err := workflow.ExecuteActivity(ctx, bare.BareDeliver, BareDeliverInput{Channel: in.SlackChannel, Text: res.Text}).Get(ctx, &res.Delivered)
		if err != nil {
			return res, err
		}
	}
	return res, nil
}

// bareSystemPrompt is capstan's opening system message, so both tasks send
// requests of the same size.
func bareSystemPrompt(in BareInput) string {
	return "You are capstan, an agent that changes code on GitHub through tools. " +
		"Every tool call that changes something is recorded and happens at most once; " +
		"when a tool reports an error, read it and adapt rather than repeating the same call. " +
		"When the work is done, answer with a short summary and no tool calls." +
		"\nTask id: " + in.TaskID +
		fmt.Sprintf("\nRepository: %s. Base branch: %s.", in.Repo, in.Base)
}

// bareActivities are the bare task's activities over the same clients a
// capstan worker builds.
type bareActivities struct {
	providers map[string]model.Provider
	tools     *tool.Registry
	slack     *slack.Client
}

// BareModelTurn streams one model answer and returns it whole.
func (a *bareActivities) BareModelTurn(ctx context.Context, in BareModelTurnInput) (model.Message, error) {
	ref, err := model.ParseRef(in.Model)
	if err != nil {
		return model.Message{}, err
	}
	provider, ok := a.providers[ref.Provider]
	if !ok {
		return model.Message{}, fmt.Errorf("no provider %q", ref.Provider)
	}
	stream, err := provider.Stream(ctx, model.Request{Model: ref.Model, Messages: in.Messages, Tools: a.tools.Specs()})
	if err != nil {
		return model.Message{}, err
	}
	defer stream.Close()
	var acc model.Accumulator
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return model.Message{}, err
		}
		acc.Add(ev)
	}
	out, err := acc.Finish(func(name string, args json.RawMessage) error {
		t, err := a.tools.Get(name)
		if err != nil {
			return err
		}
		_, err = t.Identify(args)
		return err
	})
	if err != nil {
		return model.Message{}, err
	}
	return model.Message{Role: model.RoleAssistant, Content: out.Text, ToolCalls: out.ToolCalls}, nil
}

// BareTool performs one tool call and returns what the model is told. A
// refusal is told to the model, as capstan does; any other error is
// retried by Temporal.
func (a *bareActivities) BareTool(ctx context.Context, in BareToolInput) (string, error) {
	t, err := a.tools.Get(in.Call.Name)
	if err != nil {
		return "", err
	}
	out, err := t.Execute(ctx, tool.Call{OperationID: in.OperationID, Arguments: in.Call.Arguments})
	if err != nil {
		if tool.Classify(err) == tool.VerdictFailed {
			b, _ := json.Marshal(map[string]string{"error": err.Error()})
			return string(b), nil
		}
		return "", err
	}
	return string(out.Output), nil
}

// BareDeliver posts the answer to Slack.
func (a *bareActivities) BareDeliver(ctx context.Context, in BareDeliverInput) (string, error) {
	channel, ts, err := a.slack.PostMessageContext(ctx, in.Channel, slack.MsgOptionText(in.Text, false))
	if err != nil {
		return "", err
	}
	return channel + "/" + ts, nil
}
