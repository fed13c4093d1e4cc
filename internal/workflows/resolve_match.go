package workflows

import (
	"fmt"
	"strings"
)

// MatchOperation finds the operation that given names among ids, the
// operations and deliveries of one task, by the one rule every command that
// names an operation follows (`starter resolve`, and approve/deny): the
// exact id, or else an ending of an id at a ":" boundary — such as the id
// without its "<tenant>:<task id>:", the short form status prints — that
// exactly one of ids has. Its error completes "task T has …": no
// operation, or more than one, has that name.
func MatchOperation(ids []string, given string) (string, error) {
	var match []string
	for _, id := range ids {
		if id == given {
			return id, nil
		}
		if given != "" && strings.HasSuffix(id, ":"+given) {
			match = append(match, id)
		}
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return "", fmt.Errorf("no operation %q", given)
	default:
		return "", fmt.Errorf("%d operations ending in %q (%s); give more of the id", len(match), given, strings.Join(match, ", "))
	}
}

// OperationIDs lists the ids of res's tool operations and deliveries: what
// MatchOperation chooses among.
func OperationIDs(res TaskResult) []string {
	ids := make([]string, 0, len(res.Operations)+len(res.Deliveries))
	seen := map[string]bool{}
	for _, op := range res.Operations {
		// An operation with a business key declared again keeps its id:
		// it is listed once, so that an ending of it names it alone.
		if !seen[op.OperationID] {
			seen[op.OperationID] = true
			ids = append(ids, op.OperationID)
		}
	}
	for _, d := range res.Deliveries {
		ids = append(ids, d.OperationID)
	}
	return ids
}
