package activities

import (
	"github.com/capstanhq/capstan/internal/breaker"
	"github.com/capstanhq/capstan/tool"
)

// ToolBreaker is the key of the breaker t's calls go through (toolBreaker):
// a worker shows each such breaker's state in its metrics from the start,
// for a program's own tools as for the built-in ones.
func ToolBreaker(t tool.Tool) breaker.Key { return toolBreaker(t) }
