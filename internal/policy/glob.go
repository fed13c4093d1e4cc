package policy

import "strings"

// globMatch reports whether s matches pattern, where "*" matches any run
// of characters but "/", "**" any run including "/", "?" one character
// but "/", and every other character itself. A pattern is therefore
// always valid; "acme/*" matches every repository of acme, "docs/**"
// every file under docs/.
func globMatch(pattern, s string) bool {
	for len(pattern) > 0 {
		switch {
		case strings.HasPrefix(pattern, "**"):
			rest := strings.TrimLeft(pattern, "*")
			for i := 0; i <= len(s); i++ {
				if globMatch(rest, s[i:]) {
					return true
				}
			}
			return false
		case pattern[0] == '*':
			rest := pattern[1:]
			for i := 0; i <= len(s); i++ {
				if globMatch(rest, s[i:]) {
					return true
				}
				if i < len(s) && s[i] == '/' {
					return false
				}
			}
			return false
		case len(s) == 0:
			return false
		case pattern[0] == '?':
			if s[0] == '/' {
				return false
			}
		case pattern[0] != s[0]:
			return false
		}
		pattern, s = pattern[1:], s[1:]
	}
	return len(s) == 0
}

// isLiteral is whether pattern has no wildcard.
func isLiteral(pattern string) bool {
	return !strings.ContainsAny(pattern, "*?")
}
