package main

import (
	"strings"
	"unicode/utf8"

	"github.com/capstanhq/capstan/internal/workflows"
)

// clean is s as it may reach a person's terminal: without escape sequences
// (CSI, OSC and the other ESC and C1 sequences, whole) and without any
// other control character but newline and tab. Text from a model, a file
// it read or a provider's error message goes through it before any human
// output, so it can neither move the cursor, retitle the window, restyle
// the screen nor hide what follows (docs/design.md §9.3). JSON output
// stays exact and never goes through it. Invalid UTF-8 becomes U+FFFD.
func clean(s string) string {
	if !needsCleaning(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == 0x1b: // ESC
			i += escapeLen(s[i+n:]) + n
			continue
		case r == 0x9b: // C1 CSI
			i += csiLen(s[i+n:]) + n
			continue
		case r == 0x90 || r == 0x9d || r == 0x98 || r == 0x9e || r == 0x9f: // C1 DCS, OSC, SOS, PM, APC
			i += stringLen(s[i+n:]) + n
			continue
		case r == '\n' || r == '\t':
		case r < 0x20 || (r >= 0x7f && r <= 0x9f):
			i += n
			continue
		}
		b.WriteRune(r)
		i += n
	}
	return b.String()
}

// needsCleaning: s holds a control character or invalid UTF-8.
func needsCleaning(s string) bool {
	for _, r := range s {
		if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) || r == utf8.RuneError {
			return true
		}
	}
	return false
}

// escapeLen is the length of the rest of an escape sequence after its ESC:
// a CSI ("[" parameters, final byte), a control string (OSC "]", DCS "P",
// SOS "X", PM "^", APC "_", up to its terminator), or an ESC with its
// intermediate bytes and final byte.
func escapeLen(s string) int {
	if s == "" {
		return 0
	}
	switch s[0] {
	case '[':
		return 1 + csiLen(s[1:])
	case ']', 'P', 'X', '^', '_':
		return 1 + stringLen(s[1:])
	}
	n := 0
	for n < len(s) && s[n] >= 0x20 && s[n] <= 0x2f { // intermediate bytes
		n++
	}
	if n < len(s) && s[n] >= 0x30 && s[n] <= 0x7e { // final byte
		n++
	}
	return n
}

// csiLen is the length of a CSI's parameters, intermediates and final
// byte; a sequence cut short ends at the first byte that cannot be in it.
func csiLen(s string) int {
	n := 0
	for n < len(s) && s[n] >= 0x20 && s[n] <= 0x3f { // parameter and intermediate bytes
		n++
	}
	if n < len(s) && s[n] >= 0x40 && s[n] <= 0x7e {
		n++
	}
	return n
}

// stringLen is the length of a control string's body and terminator (BEL,
// ESC \ or C1 ST); one never terminated ends before the end of its line,
// so no more than that line's text is lost with it.
func stringLen(s string) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == 0x07 || r == 0x9c:
			return i + n
		case r == '\n':
			return i
		case r == 0x1b:
			if i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
			return i // a new sequence starts: the string was cut short
		}
		i += n
	}
	return len(s)
}

// cleanResult is res with every text a person reads cleaned: the final
// answer, the failure message, what the task waits for, and the ids,
// reasons and external ids of its operations and deliveries (a business
// key or a reason can carry a model's or a provider's words).
func cleanResult(res workflows.TaskResult) workflows.TaskResult {
	res.TaskID, res.Waiting, res.Message, res.FinalText = clean(res.TaskID), clean(res.Waiting), clean(res.Message), clean(res.FinalText)
	res.FailureCode = workflows.FailureCode(clean(string(res.FailureCode)))
	res.Operations = cleanOperations(res.Operations)
	deliveries := make([]workflows.DeliveryRecord, len(res.Deliveries))
	for i, d := range res.Deliveries {
		d.OperationID, d.Target, d.ExternalID = clean(d.OperationID), clean(d.Target), clean(d.ExternalID)
		deliveries[i] = d
	}
	res.Deliveries = deliveries
	return res
}

// cleanOperations is ops, copied, with their texts cleaned.
func cleanOperations(ops []workflows.OperationRecord) []workflows.OperationRecord {
	out := make([]workflows.OperationRecord, len(ops))
	for i, op := range ops {
		op.OperationID, op.Tool, op.ExternalID, op.Reason = clean(op.OperationID), clean(op.Tool), clean(op.ExternalID), clean(op.Reason)
		out[i] = op
	}
	return out
}

// cleanAll is clean of each of ss, copied.
func cleanAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = clean(s)
	}
	return out
}
