package sandbox

import (
	"net/http"
	"strings"
)

// The git refs endpoints: GET and POST /repos/{owner}/{repo}/git/refs…,
// the way go-github's Git.GetRef and Git.CreateRef call them. The fake
// stores branches only.

func (g *GitHub) getRef(w http.ResponseWriter, r *http.Request) {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp, ref := g.repoLocked(r), r.PathValue("ref")
	branch, isBranch := strings.CutPrefix(ref, "heads/")
	sha, ok := rp.branches[branch]
	if cutoff, lagging := lagCutoff(r, g.now()); lagging && rp.branchMade[branch].After(cutoff) {
		ok = false // not yet on the replica that answers
	}
	if !isBranch || !ok {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	writeJSONBody(w, http.StatusOK, rp.refJSON(ghBases(r), branch, sha))
}

func (g *GitHub) createRef(w http.ResponseWriter, r *http.Request) {
	var in struct{ Ref, SHA *string }
	if !ghDecode(w, r, &in) {
		return
	}
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp := g.repoLocked(r)
	switch {
	case in.Ref == nil:
		ghError(w, http.StatusUnprocessableEntity, "Invalid request.\n\n\"ref\" wasn't supplied.")
	case in.SHA == nil:
		ghError(w, http.StatusUnprocessableEntity, "Invalid request.\n\n\"sha\" wasn't supplied.")
	case !strings.HasPrefix(*in.Ref, "refs/heads/") || !ghValidBranch(strings.TrimPrefix(*in.Ref, "refs/heads/")):
		// The fake stores branches only; tags and other namespaces are refused.
		ghError(w, http.StatusUnprocessableEntity, "Reference name is invalid")
	case rp.commits[*in.SHA] == nil:
		ghError(w, http.StatusUnprocessableEntity, "Object does not exist")
	default:
		branch := strings.TrimPrefix(*in.Ref, "refs/heads/")
		if _, exists := rp.branches[branch]; exists {
			ghError(w, http.StatusUnprocessableEntity, "Reference already exists")
			return
		}
		rp.branches[branch] = *in.SHA
		rp.branchMade[branch] = g.now()
		g.stats.BranchesCreated++
		writeJSONBody(w, http.StatusCreated, rp.refJSON(ghBases(r), branch, *in.SHA))
	}
}
