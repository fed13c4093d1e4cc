package github

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	gogithub "github.com/google/go-github/v62/github"

	"github.com/capstanhq/capstan/tool"
)

// This file settles the ambiguous outcome of a conditional write by sending
// it again (tool.Settler, docs/design.md §5.5): GitHub holds at most one
// open pull request per head and base, and one branch per name, so once a
// lookup saw none, a second request with the same operation id can make no
// second effect. Comments carry no such guarantee and are not Settlers.

// errSettleRefused marks a re-send GitHub refused for a reason other than
// the effect being there already: it tells nothing about the effect.
var errSettleRefused = errors.New("the re-send was refused")

// alreadyExists reports GitHub's 422 refusal of a second effect: "A pull
// request already exists for …" or "Reference already exists".
func alreadyExists(err error) bool {
	if HTTPStatus(err) != http.StatusUnprocessableEntity {
		return false
	}
	var er *gogithub.ErrorResponse
	if !errors.As(err, &er) {
		return false
	}
	if strings.Contains(er.Message, "already exists") {
		return true
	}
	for _, e := range er.Errors {
		if strings.Contains(e.Message, "already exists") {
			return true
		}
	}
	return false
}

// Settle opens the pull request again, with the operation's marker in its
// body. Only a state=all search by head and base that found none (Find:
// NotSeen) comes here: GitHub refuses a second open pull request for a
// head and base but not one beside a closed one, and the search saw no
// closed one of the operation's either. Created (201) is Found: the first
// request did not open it. Refused with 422 "A pull request already exists"
// is read back by the same search: the pull request by capstan's account
// carrying the marker is Found, several or one only at the recorded head
// are Ambiguous; one that is not seen (the list still lags, or the open
// pull request is someone else's) is an error, and the window goes on.
func (e pullRequestEffect) Settle(ctx context.Context) (tool.Observation, error) {
	if e.title == "" {
		return tool.Observation{}, fmt.Errorf("%w: no title recorded to send again", errSettleRefused)
	}
	pr, _, err := e.c.PullRequests.Create(ctx, e.repo.Owner, e.repo.Name, &gogithub.NewPullRequest{
		Title: &e.title, Head: &e.head, Base: &e.base, Body: gogithub.String(withMarker(e.body, e.opID))})
	switch {
	case err == nil:
		return tool.Observation{Outcome: tool.Found, ExternalID: pr.GetHTMLURL(), Detail: fmt.Sprintf(
			"no pull request of %s from %s into %s carried the operation's marker, so it was opened again with the same operation id: #%d",
			e.repo, e.head, e.base, pr.GetNumber())}, nil
	case !alreadyExists(err):
		return tool.Observation{}, fmt.Errorf("open %s → %s in %s again: %w: %w", e.head, e.base, e.repo, errSettleRefused, marked(err))
	}
	obs, ferr := e.Find(ctx)
	switch {
	case ferr != nil:
		return tool.Observation{}, fmt.Errorf("read back the pull request GitHub says exists: %w", ferr)
	case obs.Outcome == tool.NotSeen:
		return tool.Observation{}, fmt.Errorf("%w: GitHub says an open pull request from %s into %s exists, but the list shows none of the operation's: %s",
			errSettleRefused, e.head, e.base, obs.Detail)
	}
	obs.Detail = "sent again, GitHub refused a second pull request (422 already exists); read back: " + obs.Detail
	return obs, nil
}

// Settle creates the branch again at the commit recorded at send. Only a
// commit the operation knows (recorded from its "from" branch, or given)
// can be checked, so without one it is an error and the window goes on.
// Created (201) is Found. Refused with 422 "Reference already exists" is
// read back (Find): at the recorded commit it is Found, at another
// Ambiguous; not seen yet is an error.
func (e branchEffect) Settle(ctx context.Context) (tool.Observation, error) {
	sha := e.at
	if sha == "" && shaRE.MatchString(e.from) {
		sha = e.from
	}
	if sha == "" {
		return tool.Observation{}, fmt.Errorf("%w: no commit recorded at send to create %s at", errSettleRefused, e.branch)
	}
	ref, _, err := e.c.Git.CreateRef(ctx, e.repo.Owner, e.repo.Name, &gogithub.Reference{
		Ref: gogithub.String("refs/heads/" + e.branch), Object: &gogithub.GitObject{SHA: gogithub.String(sha)}})
	switch {
	case err == nil:
		at := ref.GetObject().GetSHA()
		return tool.Observation{Outcome: tool.Found, ExternalID: "refs/heads/" + e.branch + "@" + at, Detail: fmt.Sprintf(
			"branch %s did not exist in %s, so it was created again at %s", e.branch, e.repo, at)}, nil
	case !alreadyExists(err):
		return tool.Observation{}, fmt.Errorf("create %s in %s at %s again: %w: %w", e.branch, e.repo, sha, errSettleRefused, marked(err))
	}
	obs, ferr := e.Find(ctx)
	switch {
	case ferr != nil:
		return tool.Observation{}, fmt.Errorf("read back the branch GitHub says exists: %w", ferr)
	case obs.Outcome == tool.NotSeen:
		return tool.Observation{}, fmt.Errorf("%w: GitHub says branch %s exists, but reading it shows none: %s", errSettleRefused, e.branch, obs.Detail)
	}
	obs.Detail = "sent again, GitHub refused a second branch (422 Reference already exists); read back: " + obs.Detail
	return obs, nil
}
