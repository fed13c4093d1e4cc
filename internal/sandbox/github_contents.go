package sandbox

import (
	"encoding/base64"
	"net/http"
	"path"
	"sort"
	"strings"
)

// The contents API of the GitHub fake: read a file or list a directory at a
// ref, and create or update one file on a branch with the expected blob sha.

func (g *GitHub) getContents(w http.ResponseWriter, r *http.Request) {
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp, p, ref, u := g.repoLocked(r), strings.Trim(r.PathValue("path"), "/"), r.URL.Query().Get("ref"), ghBases(r)
	c := rp.resolveLocked(ref)
	if c == nil {
		ghError(w, http.StatusNotFound, "No commit found for the ref "+ref)
		return
	}
	if data, ok := c.files[p]; ok {
		writeJSONBody(w, http.StatusOK, rp.contentJSON(u, ref, p, data, true))
		return
	}
	// A directory: list its immediate entries, as GitHub does.
	var entries []map[string]any
	seen := map[string]bool{}
	for fp, data := range c.files {
		rest, ok := strings.CutPrefix(fp, p+"/")
		if p == "" {
			rest, ok = fp, true
		}
		if !ok {
			continue
		}
		if dir, _, isDir := strings.Cut(rest, "/"); isDir {
			if !seen[dir] {
				seen[dir] = true
				entries = append(entries, map[string]any{"type": "dir", "name": dir, "path": path.Join(p, dir), "size": 0})
			}
			continue
		}
		entries = append(entries, rp.contentJSON(u, ref, fp, data, false))
	}
	if len(entries) == 0 {
		ghError(w, http.StatusNotFound, "Not Found")
		return
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i]["path"].(string) < entries[j]["path"].(string) })
	writeJSONBody(w, http.StatusOK, entries)
}

func (g *GitHub) putContents(w http.ResponseWriter, r *http.Request) {
	var in struct {
		Message, SHA, Branch *string
		Content              *string
	}
	if !ghDecode(w, r, &in) {
		return
	}
	p := strings.Trim(r.PathValue("path"), "/")
	content, decodeErr := base64.StdEncoding.DecodeString(ghDeref(in.Content))
	g.dataMu.Lock()
	defer g.dataMu.Unlock()
	rp := g.repoLocked(r)
	branch := ghDeref(in.Branch)
	if branch == "" {
		branch = "main"
	}
	head, branchOK := rp.branches[branch]
	var current []byte
	exists := false
	if branchOK {
		current, exists = rp.commits[head].files[p]
	}
	switch {
	case in.Message == nil:
		ghError(w, http.StatusUnprocessableEntity, "Invalid request.\n\n\"message\" wasn't supplied.")
	case in.Content == nil:
		ghError(w, http.StatusUnprocessableEntity, "Invalid request.\n\n\"content\" wasn't supplied.")
	case decodeErr != nil:
		ghError(w, http.StatusUnprocessableEntity, "content is not valid Base64")
	case p == "":
		ghError(w, http.StatusUnprocessableEntity, "path cannot be blank")
	case !branchOK:
		ghError(w, http.StatusNotFound, "Branch "+branch+" not found")
	case exists && in.SHA == nil:
		ghError(w, http.StatusUnprocessableEntity, "Invalid request.\n\n\"sha\" wasn't supplied.")
	case in.SHA != nil && (!exists || *in.SHA != ghBlobSHA(current)):
		// The expected blob sha is a compare-and-set: a stale one is a conflict.
		ghError(w, http.StatusConflict, p+" does not match "+*in.SHA)
	default:
		files := make(map[string][]byte, len(rp.commits[head].files)+1)
		for k, v := range rp.commits[head].files {
			files[k] = v
		}
		files[p] = content
		c := g.commitLocked(rp, head, files, *in.Message)
		rp.branches[branch] = c.sha
		for _, is := range rp.issues {
			if is.isPull && is.state == "open" && is.head == branch {
				is.headSHA = c.sha // an open pull request follows its head branch
			}
		}
		g.stats.FilesWritten++
		status := http.StatusOK
		if !exists {
			status = http.StatusCreated
		}
		u := ghBases(r)
		writeJSONBody(w, status, map[string]any{"content": rp.contentJSON(u, branch, p, content, false), "commit": rp.commitJSON(u, c)})
	}
}

func (rp *ghRepo) contentJSON(u ghURLs, ref, p string, data []byte, withContent bool) map[string]any {
	sha, display := ghBlobSHA(data), ref
	if display == "" {
		display = "main"
	}
	m := map[string]any{"type": "file", "name": path.Base(p), "path": p, "sha": sha, "size": len(data),
		"url":          u.api + "repos/" + rp.full() + "/contents/" + p + "?ref=" + display,
		"git_url":      u.api + "repos/" + rp.full() + "/git/blobs/" + sha,
		"html_url":     u.web + rp.full() + "/blob/" + display + "/" + p,
		"download_url": u.web + rp.full() + "/raw/" + display + "/" + p}
	if withContent {
		// Like GitHub: base64 wrapped at 60 columns, and no inline content over 1 MB.
		m["encoding"], m["content"] = "none", ""
		if len(data) <= 1<<20 {
			enc := base64.StdEncoding.EncodeToString(data)
			var b strings.Builder
			for len(enc) > 60 {
				b.WriteString(enc[:60] + "\n")
				enc = enc[60:]
			}
			b.WriteString(enc + "\n")
			m["encoding"], m["content"] = "base64", b.String()
		}
	}
	return m
}

func (rp *ghRepo) commitJSON(u ghURLs, c *ghCommit) map[string]any {
	who := map[string]any{"name": "Capstan Sandbox", "email": "sandbox@capstan.invalid", "date": c.at}
	m := map[string]any{"sha": c.sha, "node_id": ghNodeID("C", c.sha), "message": c.message,
		"url": u.api + "repos/" + rp.full() + "/git/commits/" + c.sha, "html_url": u.web + rp.full() + "/commit/" + c.sha,
		"author": who, "committer": who, "parents": []map[string]any{}}
	if c.parent != "" {
		m["parents"] = []map[string]any{{"sha": c.parent, "url": u.api + "repos/" + rp.full() + "/git/commits/" + c.parent}}
	}
	return m
}
