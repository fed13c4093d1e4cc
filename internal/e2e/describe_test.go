package e2e

import (
	"context"

	"go.temporal.io/api/workflowservice/v1"
)

// describe returns the dev server's whole description of a workflow: its
// status, pending activities and search attributes, which DescribeWorkflow's
// summary leaves out.
func describe(ctx context.Context, workflowID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	d, err := temporal.DescribeWorkflow(ctx, workflowID, "")
	if err != nil {
		return nil, err
	}
	return d.RawResponse, nil
}
