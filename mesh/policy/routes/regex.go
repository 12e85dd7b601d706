package routes

import (
	"regexp"
	"regexp/syntax"
	"strings"
	"sync"

	"github.com/plexus-mesh/plexus/mesh/policy/percent"
)

// pathRegexp is a path regular expression anchored to the whole path,
// with literal prefilters: a path that does not start with the literal
// every match starts with, or end with the one every match ends with,
// is refused without running the regexp (~10x cheaper).
type pathRegexp struct {
	re     *regexp.Regexp
	prefix string
	suffix string
	// literal: the expression is the literal prefix (== suffix) itself.
	literal bool
}

func compilePathRegexp(expr string) (*pathRegexp, error) {
	re, err := compileAnchored(expr)
	if err != nil {
		return nil, err
	}
	p := &pathRegexp{re: re}
	p.prefix, _ = re.LiteralPrefix()
	if tree, err := syntax.Parse(expr, syntax.Perl); err == nil {
		pre, suf, lit := literalEnds(tree)
		if len(pre) > len(p.prefix) {
			p.prefix = pre
		}
		p.suffix, p.literal = suf, lit
	}
	return p, nil
}

func (p *pathRegexp) match(path string) bool {
	if p.literal {
		return path == p.prefix
	}
	return strings.HasPrefix(path, p.prefix) && strings.HasSuffix(path, p.suffix) &&
		p.re.MatchString(path)
}

// literalEnds returns the case-sensitive literals that begin and end every
// whole-string match of a parsed expression, and whether the expression is
// exactly that literal.
func literalEnds(re *syntax.Regexp) (prefix, suffix string, literal bool) {
	subs := []*syntax.Regexp{re}
	if re.Op == syntax.OpConcat {
		subs = re.Sub
	}
	// A leading "^" or trailing "$" changes nothing in an anchored match.
	if len(subs) > 0 && subs[0].Op == syntax.OpBeginText {
		subs = subs[1:]
	}
	if len(subs) > 0 && subs[len(subs)-1].Op == syntax.OpEndText {
		subs = subs[:len(subs)-1]
	}
	isLit := func(s *syntax.Regexp) bool {
		return s.Op == syntax.OpLiteral && s.Flags&syntax.FoldCase == 0
	}
	i := 0
	var b strings.Builder
	for i < len(subs) && isLit(subs[i]) {
		b.WriteString(string(subs[i].Rune))
		i++
	}
	prefix = b.String()
	if i == len(subs) {
		return prefix, prefix, true
	}
	j := len(subs)
	for j > i && isLit(subs[j-1]) {
		j--
	}
	b.Reset()
	for _, s := range subs[j:] {
		b.WriteString(string(s.Rune))
	}
	return prefix, b.String(), false
}

// valueRegexp is a header or query value regular expression, anchored.
type valueRegexp struct {
	re *regexp.Regexp
}

func compileValueRegexp(expr string) (*valueRegexp, error) {
	re, err := compileAnchored(expr)
	if err != nil {
		return nil, err
	}
	return &valueRegexp{re: re}, nil
}

func compileAnchored(expr string) (*regexp.Regexp, error) {
	return regexp.Compile(`^(?:` + expr + `)$`)
}

// unescapeBufs holds buffers for percent-decoding query values that a
// regexp must see decoded, so that Match does not allocate.
var unescapeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 256); return &b }}

func matchQueryRegexp(v *valueRegexp, raw string) bool {
	if strings.IndexByte(raw, '%') < 0 && strings.IndexByte(raw, '+') < 0 {
		return v.re.MatchString(raw)
	}
	bp := unescapeBufs.Get().(*[]byte)
	b := percent.AppendQuery((*bp)[:0], raw)
	ok := v.re.Match(b)
	*bp = b
	unescapeBufs.Put(bp)
	return ok
}
