package mcp

import "testing"

// A person's value names a look-up's external id when it is the id, or a
// URL whose path ends in it; never by a prefix or a part of a segment.
func TestPersonsValueNamesTheExternalID(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		given string
		want  bool
	}{
		{"T-1", true},
		{"https://tickets.example/T-1", true},
		{"https://tickets.example/browse/T-1/", true},
		{"https://tickets.example/T-10", false},
		{"https://tickets.example/T-1/comments", false},
		{"xT-1", false},
		{"/T-1", false}, // a path without a host is no URL of the ticket
	} {
		if got := names(tc.given, "T-1"); got != tc.want {
			t.Errorf("names(%q, T-1) = %t, want %t", tc.given, got, tc.want)
		}
	}
}
