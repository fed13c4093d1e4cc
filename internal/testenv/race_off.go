//go:build !race

package testenv

// RaceEnabled reports whether this test binary was built with -race; the
// binaries it builds are then built with -race too.
const RaceEnabled = false
