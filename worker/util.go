package main

import (
	"sort"
	"strings"
)

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

func withSlash(u string) string {
	if strings.HasSuffix(u, "/") {
		return u
	}
	return u + "/"
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
