package install

// How a structural setting becomes {{ if }} … {{ else }} … {{ end }} in a
// template: the object rendered both ways, a line diff, and the lines
// that differ wrapped in the setting's condition.

import (
	"strings"

	"k8s.io/apimachinery/pkg/runtime"
)

// variants writes o, and where change(copy of o) differs, the changed
// lines under cond.
func variants(cond string, o object, change func(object) error) ([]byte, error) {
	base, err := marshal(o)
	if err != nil {
		return nil, err
	}
	return nest(cond, base, o, change)
}

// nest is variants for a base that is already a template (with earlier
// conditions): o's changed rendering is diffed against base, whose
// conditional lines never differ from o's own.
func nest(cond string, base []byte, o object, change func(object) error) ([]byte, error) {
	c := runtime.DeepCopyJSON(o)
	if err := change(c); err != nil {
		return nil, err
	}
	changed, err := marshal(c)
	if err != nil {
		return nil, err
	}
	plain, err := marshal(o)
	if err != nil {
		return nil, err
	}
	return mergeLines(cond, base, plain, changed), nil
}

// mergeLines returns base with plain's lines that changed turned into
// {{- if cond }} changed {{- else }} plain {{- end }}. Lines that base
// added around plain's (its own conditions) are kept.
func mergeLines(cond string, base, plain, changed []byte) []byte {
	bl, pl, cl := lines(base), lines(plain), lines(changed)
	// Map plain's lines onto base's: base is plain plus inserted lines.
	at := make([]int, 0, len(pl)) // index in bl of each line of pl
	for i, j := 0, 0; i < len(pl); j++ {
		if bl[j] == pl[i] {
			at = append(at, j)
			i++
		}
	}
	var out []string
	emitBase := func(from, to int) { out = append(out, bl[from:to]...) } // base lines [from,to)
	next := 0                                                            // next base line to emit
	for _, h := range diff(pl, cl) {
		if h.equal {
			continue
		}
		// base lines before the hunk's first plain line
		start := len(bl)
		if h.p0 < len(pl) {
			start = at[h.p0]
		} else if len(at) > 0 {
			start = at[len(at)-1] + 1
		}
		emitBase(next, start)
		out = append(out, "{{- if "+cond+" }}")
		out = append(out, cl[h.c0:h.c1]...)
		if h.p1 > h.p0 {
			out = append(out, "{{- else }}")
			out = append(out, pl[h.p0:h.p1]...)
			next = at[h.p1-1] + 1
		} else {
			next = start
		}
		out = append(out, "{{- end }}")
	}
	emitBase(next, len(bl))
	return []byte(strings.Join(out, "\n") + "\n")
}

func lines(b []byte) []string { return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") }

// hunk is a run of lines: equal in both, or plain[p0:p1] replaced by
// changed[c0:c1].
type hunk struct {
	equal          bool
	p0, p1, c0, c1 int
}

// diff is a longest-common-subsequence line diff (the templates are a few
// hundred lines).
func diff(a, b []string) []hunk {
	n, m := len(a), len(b)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var hs []hunk
	i, j := 0, 0
	for i < n || j < m {
		if i < n && j < m && a[i] == b[j] {
			hs = append(hs, hunk{equal: true, p0: i, p1: i + 1, c0: j, c1: j + 1})
			i++
			j++
			continue
		}
		h := hunk{p0: i, c0: j}
		for (i < n || j < m) && !(i < n && j < m && a[i] == b[j]) {
			if j < m && (i == n || lcs[i][j+1] >= lcs[i+1][j]) {
				j++
			} else {
				i++
			}
		}
		h.p1, h.c1 = i, j
		hs = append(hs, h)
	}
	return hs
}
