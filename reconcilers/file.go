package reconcilers

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"

	"github.com/google/go-github/v62/github"
)

// FileQuery looks for the content an operation wrote to a file.
type FileQuery struct {
	Repo         Repo
	Branch, Path string
	Content      string // the whole content that was to be written
}

func fileQuery(t Target) (FileQuery, error) {
	var a struct {
		Repo, Branch, Path string
		Content            *string
	}
	if err := decodeArgs(t, &a); err != nil {
		return FileQuery{}, err
	}
	if err := required(t.Kind, [2]string{"branch", a.Branch}, [2]string{"path", a.Path}); err != nil {
		return FileQuery{}, err
	}
	if a.Content == nil {
		return FileQuery{}, fmt.Errorf("%s: %w: argument \"content\" is missing", t.Kind, ErrBadTarget)
	}
	repo, err := parseRepo(t.Kind, a.Repo)
	if err != nil {
		return FileQuery{}, err
	}
	return FileQuery{Repo: repo, Branch: a.Branch, Path: a.Path, Content: *a.Content}, nil
}

// File reads the file on the branch: holding exactly the content (its blob
// SHA equals the git blob SHA of Content) is Found, with that SHA as the
// tool records it; missing or holding anything else is NotSeen. The write is
// a compare-and-set on the blob SHA, so content that is there is content
// that was written, whoever wrote it — and writing it again changes nothing.
func (g *GitHub) File(ctx context.Context, q FileQuery) (Observation, error) {
	want := gitBlobSHA([]byte(q.Content))
	file, dir, _, err := g.c.Repositories.GetContents(ctx, q.Repo.Owner, q.Repo.Name, q.Path,
		&github.RepositoryContentGetOptions{Ref: q.Branch})
	where := fmt.Sprintf("%s on %s of %s", q.Path, q.Branch, q.Repo)
	switch {
	case notFound(err):
		return Observation{Outcome: NotSeen, Detail: where + " does not exist"}, nil
	case err != nil:
		return Observation{}, fmt.Errorf("read %s: %w", where, err)
	case dir != nil || file.GetType() != "file":
		return Observation{Outcome: NotSeen, Detail: where + " is not a regular file"}, nil
	case file.GetSHA() != want:
		return Observation{Outcome: NotSeen, Detail: fmt.Sprintf("%s holds blob %s, not the content's %s", where, file.GetSHA(), want)}, nil
	}
	return Observation{Outcome: Found, ExternalID: want, Detail: fmt.Sprintf("%s holds the content (blob %s)", where, want)}, nil
}

// gitBlobSHA is git's object id of content as a blob, the SHA GitHub reports
// for a file.
func gitBlobSHA(content []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(content))
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil))
}
