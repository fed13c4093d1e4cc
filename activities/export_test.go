package activities

import "context"

// What the breaker is told of a call's ending, for the tests.
var (
	ToolHealth  = toolHealth
	SlackHealth = slackHealth
	ModelHealth = modelHealth
)

// SegmentItems bounds the items of one transcript manifest link.
const SegmentItems = segmentItems

// ManifestRefs returns the references of the items of the transcript a
// manifest names, walking the chain it builds on.
func (a *Activities) ManifestRefs(ctx context.Context, ref string) ([]string, error) {
	_, refs, err := a.manifestRefs(ctx, ref)
	return refs, err
}
