package main

import (
	"context"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// describe returns the server's whole description of a task's workflow:
// its status and its pending activities (with their heartbeat details),
// which DescribeWorkflow's summary leaves out.
func describe(ctx context.Context, c client.Client, workflowID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	d, err := c.DescribeWorkflow(ctx, workflowID, "")
	if err != nil {
		return nil, err
	}
	return d.RawResponse, nil
}
