package activities

import (
	"encoding/json"
	"fmt"
	"strings"
)

// summarizeCall is the activity summary the Temporal UI shows for a tool
// call, e.g. "create_pull_request acme/payments agent/fix → main".
func summarizeCall(tool string, arguments json.RawMessage) string {
	var args map[string]any
	_ = json.Unmarshal(arguments, &args)
	s := func(k string) string {
		v, _ := args[k].(string)
		return v
	}
	name := strings.TrimPrefix(tool, "github_")
	repo := s("repo")
	switch tool {
	case "github_create_pull_request":
		return fmt.Sprintf("%s %s %s → %s", name, repo, s("head"), s("base"))
	case "github_create_branch":
		return fmt.Sprintf("%s %s %s from %s", name, repo, s("branch"), s("from"))
	case "github_put_file":
		return fmt.Sprintf("%s %s %s:%s", name, repo, s("branch"), s("path"))
	case "github_get_file":
		if ref := s("ref"); ref != "" {
			return fmt.Sprintf("%s %s %s@%s", name, repo, s("path"), ref)
		}
		return fmt.Sprintf("%s %s %s", name, repo, s("path"))
	case "github_comment":
		n, _ := args["number"].(float64)
		return fmt.Sprintf("%s %s #%d", name, repo, int(n))
	default:
		return strings.TrimSpace(name + " " + repo)
	}
}
