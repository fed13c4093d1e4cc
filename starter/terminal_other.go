//go:build !unix

package main

import "io"

// terminalSize: without a unix terminal, output is plain text.
func terminalSize(io.Writer) (cols, rows int, ok bool) { return 0, 0, false }
