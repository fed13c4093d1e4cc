package mcp

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstanhq/capstan/tool"
)

// lookedUp is a tool whose operator named a look-up tool: a tool.Finder,
// so an operation of it whose answer was lost is settled by asking the
// look-up, never by sending it again blindly, and whose effect is a
// tool.ReadBack, so a person's found is checked by asking it too. A tool
// without a look-up is no Finder: its unknown operations go to a person
// (starter resolve), whose found is recorded as given.
type lookedUp struct {
	*Tool
}

// Effect is the look-up of s's operation.
func (t *lookedUp) Effect(s tool.Sent) (tool.Effect, error) {
	if s.OperationID == "" {
		return nil, fmt.Errorf("no operation id to look up")
	}
	return lookup{impl: t.Tool, operationID: s.OperationID}, nil
}

// lookup asks the look-up tool about one operation.
type lookup struct {
	impl        *Tool
	operationID string
}

// Key says what is looked for.
func (l lookup) Key() string {
	return fmt.Sprintf("what %s/%s says of operation %s", l.impl.Server(), l.impl.lookup, l.operationID)
}

// lookupAnswer is the look-up tool's structured content.
type lookupAnswer struct {
	Status     string `json:"status"`
	ExternalID string `json:"external_id"`
}

// Find calls the look-up tool with {"operation_id": …} once: its
// structured content's status found, absent or unknown is the observation
// (found, not seen, ambiguous). An error answer, or a status it does not
// know, means the question could not be asked.
func (l lookup) Find(ctx context.Context) (tool.Observation, error) {
	args, _ := json.Marshal(map[string]string{"operation_id": l.operationID})
	// The look-up carries no operation id of its own: it has no effect.
	res, err := l.impl.conn.Call(ctx, l.impl.lookup, args, "")
	if err != nil {
		return tool.Observation{}, bound(fmt.Errorf("look-up %s/%s: %w", l.impl.Server(), l.impl.lookup, err))
	}
	ans, err := readAnswer(res)
	if err != nil {
		return tool.Observation{}, bound(fmt.Errorf("look-up %s/%s: %w", l.impl.Server(), l.impl.lookup, err))
	}
	asked := fmt.Sprintf("asked %s/%s about operation %s", l.impl.Server(), l.impl.lookup, l.operationID)
	switch ans.Status {
	case "found":
		return tool.Observation{Outcome: tool.Found, ExternalID: ans.ExternalID,
			Detail: fmt.Sprintf("%s: found %s", asked, ans.ExternalID)}, nil
	case "absent":
		return tool.Observation{Outcome: tool.NotSeen, Detail: asked + ": absent"}, nil
	default: // unknown
		return tool.Observation{Outcome: tool.Ambiguous, Detail: asked + ": the server cannot tell"}, nil
	}
}

// ReadBack checks a person's found (`starter resolve --found VALUE`)
// against the look-up before anything is recorded, as GitHub's tools read
// a found URL back. The look-up is asked about the operation, as Find asks
// it, since it answers by operation id:
//   - found, with an external id the person's value names (the same, or a
//     URL whose last path segment is it): the effect, recorded in the
//     look-up's form, as Execute records it;
//   - found with another external id: refused, naming the one found;
//   - absent: refused — the server says the operation made nothing, which
//     `resolve --absent` says so that it is sent again;
//   - unknown (the server cannot tell): the person's word stands, recorded
//     as given;
//   - no answer: an error, and nothing is accepted.
func (l lookup) ReadBack(ctx context.Context, given string) (tool.Observation, error) {
	obs, err := l.Find(ctx)
	if err != nil {
		return tool.Observation{}, err
	}
	switch obs.Outcome {
	case tool.Found:
		if obs.ExternalID == "" {
			return tool.Observation{Outcome: tool.Found, ExternalID: given, Detail: obs.Detail + "; it names no id, so the person's is kept"}, nil
		}
		if names(given, obs.ExternalID) {
			return obs, nil
		}
		return tool.Observation{Outcome: tool.NotSeen,
			Detail: fmt.Sprintf("%s/%s found operation %s's effect as %s, which %s does not name", l.impl.Server(), l.impl.lookup, l.operationID, obs.ExternalID, given)}, nil
	case tool.NotSeen:
		return tool.Observation{Outcome: tool.NotSeen,
			Detail: fmt.Sprintf("%s/%s says operation %s made nothing (if so, resolve --absent sends it again)", l.impl.Server(), l.impl.lookup, l.operationID)}, nil
	default:
		return tool.Observation{Outcome: tool.Found, ExternalID: given, Detail: obs.Detail + "; the person's word stands"}, nil
	}
}

// names reports whether a person's value names the external id id: it is
// id, or a URL whose path ends in the segment id.
func names(given, id string) bool {
	if given == id {
		return true
	}
	u, err := url.Parse(given)
	return err == nil && u.Host != "" && path.Base(strings.TrimRight(u.Path, "/")) == id
}

func readAnswer(res *sdk.CallToolResult) (lookupAnswer, error) {
	if res.IsError {
		return lookupAnswer{}, fmt.Errorf("answered an error: %s", textOf(res))
	}
	var ans lookupAnswer
	b, err := json.Marshal(res.StructuredContent)
	if err == nil {
		err = json.Unmarshal(b, &ans)
	}
	if err != nil || res.StructuredContent == nil {
		return lookupAnswer{}, fmt.Errorf(`answered no structuredContent {"status": "found"|"absent"|"unknown", "external_id": …}`)
	}
	switch ans.Status {
	case "found", "absent", "unknown":
		return ans, nil
	}
	return lookupAnswer{}, fmt.Errorf(`answered status %q, not found, absent or unknown`, ans.Status)
}
