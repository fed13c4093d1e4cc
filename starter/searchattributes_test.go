package main

import (
	"errors"
	"fmt"
	"testing"

	"go.temporal.io/api/serviceerror"

	"github.com/capstanhq/capstan/internal/workflows"
)

// Every attribute a task carries has a type name for the command the
// starter prints, so a new attribute cannot print `--type ` with nothing.
func TestEveryAttributeHasACLIType(t *testing.T) {
	for _, key := range workflows.SearchAttributes {
		if attributeTypes[key.GetValueType()] == "" {
			t.Errorf("%s is a %s: attributeTypes has no CLI name for it", key.GetName(), key.GetValueType())
		}
	}
}

// The refusal is read from the server's own words (the dev server's, as
// recorded; Elasticsearch's), wrapped as the SDK returns it, and nothing
// else is taken for it.
func TestMissingSearchAttributeReadsTheServersRefusal(t *testing.T) {
	for _, c := range []struct {
		err  error
		want string
	}{
		{fmt.Errorf("start: %w", serviceerror.NewInvalidArgument("Namespace default has no mapping defined for search attribute CapstanStatus")), "CapstanStatus"},
		{serviceerror.NewInvalidArgument("search attribute CapstanTenant is not defined"), "CapstanTenant"},
		{serviceerror.NewInvalidArgument("WorkflowId is not set on request."), ""},
		{errors.New("Namespace default has no mapping defined for search attribute CapstanRepo"), ""}, // not the server's
		{nil, ""},
	} {
		got, ok := missingSearchAttribute(c.err)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("missingSearchAttribute(%v) = %q, %v; want %q", c.err, got, ok, c.want)
		}
	}
}

// `starter list`'s filters read CapstanFlags, and a flag's Bool only where
// the namespace defines it: a filter naming an undefined attribute is
// refused by the server.
func TestFlagFilterNamesTheBoolOnlyWhereDefined(t *testing.T) {
	for _, c := range []struct {
		flags  []workflows.Flag
		legacy map[workflows.Flag]bool
		want   string
	}{
		{nil, nil, "WorkflowType = 'AgentTask'"},
		{[]workflows.Flag{workflows.FlagNeedsHuman}, nil,
			"WorkflowType = 'AgentTask' AND CapstanFlags = 'needs_human' AND ExecutionStatus = 'Running'"},
		{[]workflows.Flag{workflows.FlagNeedsHuman}, map[workflows.Flag]bool{workflows.FlagNeedsHuman: true},
			"WorkflowType = 'AgentTask' AND (CapstanFlags = 'needs_human' OR CapstanNeedsHuman = true) AND ExecutionStatus = 'Running'"},
		{[]workflows.Flag{workflows.FlagNeedsHuman, workflows.FlagAwaitingApproval}, map[workflows.Flag]bool{workflows.FlagAwaitingApproval: true},
			"WorkflowType = 'AgentTask' AND CapstanFlags = 'needs_human' AND (CapstanFlags = 'awaiting_approval' OR CapstanAwaitingApproval = true) AND ExecutionStatus = 'Running'"},
	} {
		if got := flagFilter(c.flags, c.legacy); got != c.want {
			t.Errorf("flagFilter(%v, %v) = %q, want %q", c.flags, c.legacy, got, c.want)
		}
	}
}
