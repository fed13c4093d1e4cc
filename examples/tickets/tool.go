// Package tickets is a team's own agent tool on capstan, written the way a
// team outside capstan would: a module of its own (example.com/tickets)
// that imports only capstan's public packages — tool for the tool, worker
// to run it, capstantest in its tests — so Go itself forbids it capstan's
// internal/ packages.
//
// Service is a tiny ticket tracker over HTTP; NewCreateTool makes
// tickets_create, an unsafe tool (a second request opens a second ticket)
// that sends its operation id with the request and looks a ticket up by it
// when the answer was lost. cmd/worker runs it on a capstan worker.
package tickets

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/capstanhq/capstan/tool"
)

// CreateArgs are what the model gives tickets_create.
type CreateArgs struct {
	Project string `json:"project" jsonschema:"the project key, e.g. OPS"`
	Title   string `json:"title" jsonschema:"one line"`
	Body    string `json:"body,omitempty"`
}

// NewCreateTool returns tickets_create, acting on the ticket service at
// baseURL through hc (nil: http.DefaultClient).
func NewCreateTool(baseURL string, hc *http.Client) (tool.Tool, error) {
	if hc == nil {
		hc = http.DefaultClient
	}
	api := client{base: strings.TrimSuffix(baseURL, "/"), hc: hc}
	return tool.New("tickets_create", tool.Unsafe, api.create,
		tool.Description("Open a ticket in a project of the team's tracker."),
		tool.Summary(func(in CreateArgs) string { return "ticket in " + in.Project + ": " + in.Title }),
		tool.ExternalID(func(t Ticket) string { return api.url(t.ID) }),
		tool.Targets(func(in CreateArgs) tool.Target {
			return tool.Target{Attributes: map[string]string{"project": in.Project}}
		}),
		tool.Lookup(api.find),
		tool.ReadBackURL(api.readBack),
	)
}

// client is the ticket service's API as the tool uses it.
type client struct {
	base string
	hc   *http.Client
}

func (c client) url(id int) string { return fmt.Sprintf("%s/tickets/%d", c.base, id) }

// create sends one POST; the operation id travels as X-Request-Id, which
// the service keeps with the ticket.
func (c client) create(ctx context.Context, call tool.Call, in CreateArgs) (Ticket, error) {
	body, _ := json.Marshal(in)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/tickets", bytes.NewReader(body))
	if err != nil {
		return Ticket{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", call.OperationID)
	var t Ticket
	return t, c.do(req, http.StatusCreated, &t)
}

// find looks the operation's ticket up by its request id.
func (c client) find(ctx context.Context, s tool.Sent, _ CreateArgs) (tool.Observation, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/tickets?request_id="+url.QueryEscape(s.OperationID), nil)
	if err != nil {
		return tool.Observation{}, err
	}
	var found []Ticket
	if err := c.do(req, http.StatusOK, &found); err != nil {
		return tool.Observation{}, err
	}
	switch len(found) {
	case 0:
		return tool.Observation{Outcome: tool.NotSeen, Detail: "no ticket carries request id " + s.OperationID}, nil
	case 1:
		return tool.Observation{Outcome: tool.Found, ExternalID: c.url(found[0].ID), Detail: fmt.Sprintf("ticket %d carries request id %s", found[0].ID, s.OperationID)}, nil
	default:
		return tool.Observation{Outcome: tool.Ambiguous, Detail: fmt.Sprintf("%d tickets carry request id %s", len(found), s.OperationID)}, nil
	}
}

// readBack checks a URL a person says is the operation's ticket
// (`starter resolve --found URL`): a ticket of this service that carries
// the operation's request id.
func (c client) readBack(ctx context.Context, s tool.Sent, _ CreateArgs, link string) (tool.Observation, error) {
	var id int
	if _, err := fmt.Sscanf(strings.TrimPrefix(link, c.base), "/tickets/%d", &id); err != nil || c.url(id) != link {
		return tool.Observation{Outcome: tool.Ambiguous, Detail: link + " is not a ticket of " + c.base}, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, link, nil)
	if err != nil {
		return tool.Observation{}, err
	}
	var t Ticket
	if err := c.do(req, http.StatusOK, &t); err != nil {
		return tool.Observation{}, err
	}
	if t.RequestID != s.OperationID {
		return tool.Observation{Outcome: tool.Ambiguous, Detail: fmt.Sprintf("ticket %d carries request id %q, not %s", t.ID, t.RequestID, s.OperationID)}, nil
	}
	return tool.Observation{Outcome: tool.Found, ExternalID: link, Detail: fmt.Sprintf("ticket %d carries request id %s", t.ID, s.OperationID)}, nil
}

// do sends req and decodes the answer into v. A 4xx is a refusal (nothing
// was created); any other unexpected answer, like a transport error, is
// left for tool.Classify, which calls it unknown.
func (c client) do(req *http.Request, want int, v any) error {
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != want {
		err := fmt.Errorf("%s %s: %s", req.Method, req.URL.Path, resp.Status)
		if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusRequestTimeout && resp.StatusCode != http.StatusTooManyRequests {
			return tool.WithVerdict(err, tool.VerdictFailed)
		}
		return err
	}
	return json.NewDecoder(resp.Body).Decode(v)
}
