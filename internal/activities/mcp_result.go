package activities

import (
	"context"

	"github.com/capstanhq/capstan/internal/config"
	"github.com/capstanhq/capstan/internal/mcp"
	"github.com/capstanhq/capstan/tool"
)

// capMCPResult bounds what the model is shown of an MCP tool's result to
// the worker's cap (Deps.MCPResultCap): a result over it is kept whole in
// the ledger as a transcript item, and the model is shown mcp.Cap's
// document — the text cut to about the cap, with a note naming the item.
// The operation's recorded result and its tool message hold the capped
// document, and the workflow's history only their references and preview.
// When the ledger cannot keep the whole result, the model is still shown
// the capped document, whose note says so: the call happened, and its
// outcome must be recorded. Any other tool's output is returned unchanged.
func (a *Activities) capMCPResult(ctx context.Context, impl tool.Tool, output []byte) []byte {
	limit := a.MCPResultCap
	if limit <= 0 {
		limit = config.DefaultMCPResultCap
	}
	if mcp.Unwrap(impl) == nil || len(output) <= limit {
		return output
	}
	// Kept even if the activity is being cancelled: the call happened.
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), verifyTimeout)
	defer cancel()
	ref, err := a.Ledger.PutItem(pctx, output)
	if err != nil {
		a.Logger.WarnContext(ctx, "mcp: the whole of a large result could not be kept; the model is shown it cut", "tool", impl.Name(), "bytes", len(output), "error", err)
		ref = ""
	}
	return mcp.Cap(output, limit, ref)
}
