package anthropic

import (
	"encoding/json"
	"slices"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"

	"github.com/capstanhq/capstan/internal/model"
)

// newParams maps a provider-neutral request onto Messages parameters.
//
// The transcript's shape differs from Anthropic's in three ways, all settled
// here: system messages go to the separate system prompt; an assistant's tool
// calls become tool_use blocks of its message; and tool results become
// tool_result blocks of a user message. Consecutive items of one role are
// merged into one message, with tool_result blocks first, because the API
// expects the results of one assistant turn together, at the start of the
// user message that follows it. Text that is empty or only whitespace is
// left out: the API refuses empty text blocks.
func newParams(req model.Request, maxTokens int64) anthropic.MessageNewParams {
	params := anthropic.MessageNewParams{
		Model:     req.Model,
		MaxTokens: maxTokens,
	}
	var b transcriptBuilder
	for _, m := range req.Messages {
		switch m.Role {
		case model.RoleSystem:
			if !blank(m.Content) {
				params.System = append(params.System, anthropic.TextBlockParam{Text: m.Content})
			}
		case model.RoleAssistant:
			var blocks []anthropic.ContentBlockParamUnion
			if !blank(m.Content) {
				blocks = append(blocks, anthropic.NewTextBlock(m.Content))
			}
			for _, c := range m.ToolCalls {
				blocks = append(blocks, anthropic.NewToolUseBlock(c.ID, toolInput(c.Arguments), c.Name))
			}
			b.add(model.RoleAssistant, blocks...)
		case model.RoleTool:
			result := anthropic.ToolResultBlockParam{ToolUseID: m.ToolCallID}
			if m.Content != "" {
				result.Content = []anthropic.ToolResultBlockParamContentUnion{
					{OfText: &anthropic.TextBlockParam{Text: m.Content}}}
			}
			b.addToolResult(anthropic.ContentBlockParamUnion{OfToolResult: &result})
		default:
			if !blank(m.Content) {
				b.add(model.RoleUser, anthropic.NewTextBlock(m.Content))
			}
		}
	}
	params.Messages = b.messages()
	for _, t := range req.Tools {
		tool := anthropic.ToolParam{Name: t.Name, InputSchema: inputSchema(t.Parameters)}
		if t.Description != "" {
			tool.Description = anthropic.String(t.Description)
		}
		params.Tools = append(params.Tools, anthropic.ToolUnionParam{OfTool: &tool})
	}
	return params
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }

// transcriptBuilder collects content blocks into alternating user and
// assistant messages.
type transcriptBuilder struct {
	roles  []model.Role // RoleUser or RoleAssistant
	blocks [][]anthropic.ContentBlockParamUnion
}

// add appends blocks to the last message if it has role, else starts one.
func (b *transcriptBuilder) add(role model.Role, blocks ...anthropic.ContentBlockParamUnion) {
	if len(blocks) == 0 {
		return
	}
	n := len(b.roles)
	if n > 0 && b.roles[n-1] == role {
		b.blocks[n-1] = append(b.blocks[n-1], blocks...)
		return
	}
	b.roles = append(b.roles, role)
	b.blocks = append(b.blocks, blocks)
}

// addToolResult adds a tool_result block to the current user message, after
// the tool results already there and before any text.
func (b *transcriptBuilder) addToolResult(block anthropic.ContentBlockParamUnion) {
	n := len(b.roles)
	if n == 0 || b.roles[n-1] != model.RoleUser {
		b.add(model.RoleUser, block)
		return
	}
	cur := b.blocks[n-1]
	at := 0
	for at < len(cur) && cur[at].OfToolResult != nil {
		at++
	}
	b.blocks[n-1] = slices.Insert(cur, at, block)
}

func (b *transcriptBuilder) messages() []anthropic.MessageParam {
	out := make([]anthropic.MessageParam, 0, len(b.roles))
	for i, role := range b.roles {
		if role == model.RoleAssistant {
			out = append(out, anthropic.NewAssistantMessage(b.blocks[i]...))
		} else {
			out = append(out, anthropic.NewUserMessage(b.blocks[i]...))
		}
	}
	return out
}

// toolInput is a committed call's arguments as the tool_use block's input:
// the JSON object itself, not a string holding it. Empty arguments mean {}.
func toolInput(args json.RawMessage) json.RawMessage {
	if len(strings.TrimSpace(string(args))) == 0 {
		return json.RawMessage("{}")
	}
	return args
}

// inputSchema maps a tool's JSON Schema object onto the SDK's input schema:
// properties and required have fields of their own, every other keyword
// travels as an extra field. The type is always "object", as the API
// requires.
func inputSchema(schema map[string]any) anthropic.ToolInputSchemaParam {
	var s anthropic.ToolInputSchemaParam
	for k, v := range schema {
		switch k {
		case "type":
		case "properties":
			s.Properties = v
		case "required":
			if names, ok := stringList(v); ok {
				s.Required = names
				continue
			}
			s.ExtraFields = extra(s.ExtraFields, k, v)
		default:
			s.ExtraFields = extra(s.ExtraFields, k, v)
		}
	}
	return s
}

func extra(m map[string]any, k string, v any) map[string]any {
	if m == nil {
		m = make(map[string]any)
	}
	m[k] = v
	return m
}

func stringList(v any) ([]string, bool) {
	switch l := v.(type) {
	case []string:
		return l, true
	case []any:
		out := make([]string, 0, len(l))
		for _, e := range l {
			s, ok := e.(string)
			if !ok {
				return nil, false
			}
			out = append(out, s)
		}
		return out, true
	}
	return nil, false
}
