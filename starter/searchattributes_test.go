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
