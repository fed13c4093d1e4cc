package github

import (
	"maps"
	"slices"

	gogithub "github.com/google/go-github/v62/github"
)

// GitHub App permission levels, as GitHub names them.
const (
	permRead  = "read"
	permWrite = "write"
)

// toolPermissions are the GitHub App permissions each tool needs: for its
// call, for the look-up that finds what it did when GitHub's answer was
// lost, and for the policy's checks of its target. Every tool also reads
// the repository itself (the default branch, metadata: read).
var toolPermissions = map[string]map[string]string{
	NameGetFile:          {"contents": permRead},
	NameListPullRequests: {"pull_requests": permRead},
	// A branch is a ref (contents); from must be on one of its branches.
	NameCreateBranch: {"contents": permWrite},
	NamePutFile:      {"contents": permWrite},
	// The look-up lists the pull requests of the head branch.
	NameCreatePullRequest: {"pull_requests": permWrite},
	// A comment on an issue or a pull request goes through the Issues
	// API, and its look-up lists the issue's comments.
	NameComment: {"issues": permWrite},
}

// AppPermissions are the GitHub App permissions the tools named need, at
// the level the most demanding of them needs each (write over read), and
// metadata: read, which every call needs: what an installation token is
// requested with (ghapp), so that a token can do nothing the tools do
// not. A name without a known need adds nothing.
func AppPermissions(names ...string) *gogithub.InstallationPermissions {
	need := map[string]string{"metadata": permRead}
	for _, n := range names {
		for perm, level := range toolPermissions[n] {
			if need[perm] != permWrite {
				need[perm] = level
			}
		}
	}
	p := &gogithub.InstallationPermissions{}
	fields := map[string]**string{"metadata": &p.Metadata, "contents": &p.Contents,
		"pull_requests": &p.PullRequests, "issues": &p.Issues}
	for _, perm := range slices.Sorted(maps.Keys(need)) {
		level := need[perm]
		*fields[perm] = &level
	}
	return p
}

// ToolNames are the names of the tools Tools and ToolsAs return.
func ToolNames() []string {
	return []string{NameGetFile, NameListPullRequests, NameCreateBranch, NamePutFile, NameCreatePullRequest, NameComment}
}
