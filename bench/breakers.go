package main

import (
	"errors"

	"github.com/capstanhq/capstan/activities"
)

// breakersBuilt says whether this capstan has circuit breakers per
// dependency (docs/design.md §7). The outage row measures "breakers off"
// either way; "breakers on" runs only when they are built.
const breakersBuilt = false

// errBreakersNotBuilt is configureBreakers' answer to "on" while
// breakersBuilt is false.
var errBreakersNotBuilt = errors.New("breakers: not built yet")

// configureBreakers turns the breakers of one worker's activities on or
// off. It is the only place the bench knows how breakers are wired.
func configureBreakers(d *activities.Deps, on bool) error {
	if on {
		return errBreakersNotBuilt
	}
	return nil
}
