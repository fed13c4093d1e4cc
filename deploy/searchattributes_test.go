package deploy_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/capstanhq/capstan/internal/testenv"
	"github.com/capstanhq/capstan/internal/workflows"
)

// TestEveryListOfSearchAttributesIsCapstans: a worker registers capstan's
// search attributes itself (workflows.SearchAttributes), but two servers
// get them before any worker runs — `make demo`'s dev server from
// scripts/demo.sh's --search-attribute flags, docker-compose.yml's from its
// create-search-attributes job — so that `starter run` works at once. Both
// lists must name every attribute, with its type, and nothing else: not
// the Bools tasks set before changeSearchFlags (workflows.
// LegacySearchAttributes), which a fresh namespace need not have.
func TestEveryListOfSearchAttributesIsCapstans(t *testing.T) {
	t.Parallel()
	var want []string
	for _, k := range workflows.SearchAttributes {
		typ := strings.TrimPrefix(enumspb.IndexedValueType_name[int32(k.GetValueType())], "INDEXED_VALUE_TYPE_")
		want = append(want, k.GetName()+"="+strings.ToLower(strings.ReplaceAll(typ, "_", ""))) // KEYWORD_LIST: KeywordList
	}
	slices.Sort(want)
	for _, src := range []struct {
		file string
		re   *regexp.Regexp
	}{
		{"scripts/demo.sh", regexp.MustCompile(`--search-attribute (\w+)=(\w+)`)},
		{"docker-compose.yml", regexp.MustCompile(`(?m)^\s*ensure (\w+) (\w+)`)},
	} {
		b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), src.file))
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, m := range src.re.FindAllStringSubmatch(string(b), -1) {
			got = append(got, m[1]+"="+strings.ToLower(m[2]))
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s registers %q; capstan's search attributes are %q", src.file, got, want)
		}
	}
}
