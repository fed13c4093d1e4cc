package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/capstanhq/capstan"
	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/tool"
)

// Pool is a worker's connections to the servers of its configuration and
// their tools.
type Pool struct {
	Config *Config
	conns  []*Conn
	tools  []tool.Tool
}

// Open connects to every server of cfg and builds its tools. A server that
// cannot be reached, or a tool setting naming a tool the server does not
// offer, fails it with one sentence naming the server; what was opened is
// closed.
func Open(ctx context.Context, cfg *Config, logger *slog.Logger) (_ *Pool, err error) {
	p := &Pool{Config: cfg}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	names := map[string]string{} // capstan name → server/tool, for collisions
	for _, name := range cfg.Names() {
		c, err := Dial(ctx, cfg.Servers[name], logger)
		if err != nil {
			return nil, err
		}
		p.conns = append(p.conns, c)
		ts, err := ServerTools(c)
		if err != nil {
			return nil, err
		}
		for _, tt := range ts {
			t := Unwrap(tt)
			if other, dup := names[t.Name()]; dup {
				return nil, fmt.Errorf("%w %s: server %q: tool %q is named %s, as %s is", ErrConfig, cfg.File, name, t.Remote(), t.Name(), other)
			}
			names[t.Name()] = name + "/" + t.Remote()
			p.tools = append(p.tools, tt)
		}
	}
	return p, nil
}

// Tools are the tools of every server, in the order of their servers and
// names.
func (p *Pool) Tools() []tool.Tool {
	if p == nil {
		return nil
	}
	return slices.Clone(p.tools)
}

// Breakers are the breaker thresholds the servers set, by breaker key
// (mcp/<server>); a server that sets none is not listed.
func (p *Pool) Breakers() map[string]config.BreakerSettings {
	out := map[string]config.BreakerSettings{}
	if p == nil {
		return out
	}
	for _, c := range p.conns {
		if c.server.Capstan.Breaker != nil {
			out["mcp/"+c.server.Name] = *c.server.Capstan.Breaker
		}
	}
	return out
}

// Servers are the names of the servers, sorted.
func (p *Pool) Servers() []string {
	if p == nil {
		return nil
	}
	return p.Config.Names()
}

// Close closes every connection (and stops every stdio server).
func (p *Pool) Close() {
	if p == nil {
		return
	}
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// ServerTools builds the tools of c's server as it lists them now. A tool
// setting naming a tool the server does not offer, or a look-up it does
// not offer, is an error naming the server and the field.
func ServerTools(c *Conn) ([]tool.Tool, error) {
	s := c.server
	listed := c.Tools()
	var errs []error
	for _, name := range sortedKeys(s.Capstan.Tools) {
		ts := s.Capstan.Tools[name]
		field := fmt.Sprintf("capstan.tools.%s", name)
		switch {
		case listed[name] == nil:
			errs = append(errs, fmt.Errorf("server %q: %s: the server offers no tool %q", s.Name, field, name))
		case ts.Lookup != "" && listed[ts.Lookup] == nil:
			errs = append(errs, fmt.Errorf("server %q: %s.lookup: the server offers no tool %q", s.Name, field, ts.Lookup))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	var out []tool.Tool
	for _, name := range sortedKeys(listed) {
		ts := s.Capstan.Tools[name]
		t := &Tool{conn: c, remote: name, name: ToolName(s.Name, name), class: classOf(s, listed[name]), lookup: ts.Lookup}
		if t.lookup != "" {
			out = append(out, &lookedUp{t})
		} else {
			out = append(out, t)
		}
	}
	return out, nil
}

// classOf is a tool's class: the configured one; else, for a trusted
// server, what its annotations claim (readOnlyHint → read_only,
// idempotentHint → idempotent); else unsafe.
func classOf(s *Server, t *sdk.Tool) capstan.Class {
	if c := s.Capstan.Tools[t.Name].Class; c != "" {
		return c
	}
	if s.Capstan.Trusted && t.Annotations != nil {
		switch {
		case t.Annotations.ReadOnlyHint:
			return capstan.ClassReadOnly
		case t.Annotations.IdempotentHint:
			return capstan.ClassIdempotent
		}
	}
	return capstan.ClassUnsafe
}

// ClassSource says where a tool's class came from, for people.
func ClassSource(s *Server, t *sdk.Tool) string {
	switch {
	case s.Capstan.Tools[t.Name].Class != "":
		return "configured"
	case s.Capstan.Trusted && t.Annotations != nil && (t.Annotations.ReadOnlyHint || t.Annotations.IdempotentHint):
		return "the trusted server's annotations"
	case t.Annotations != nil && (t.Annotations.ReadOnlyHint || t.Annotations.IdempotentHint):
		return "default (annotations not believed: the server is not trusted)"
	}
	return "default"
}

// Unwrap returns the *Tool of an MCP tool (a *Tool, or one with a
// look-up), nil for any other tool.
func Unwrap(t tool.Tool) *Tool {
	switch t := t.(type) {
	case *Tool:
		return t
	case *lookedUp:
		return t.Tool
	}
	return nil
}
