package vizprom

import (
	"fmt"
	"slices"
	"strings"
)

// Names are the names a PromQL expression uses, as a lexer sees them: no
// type checking, but enough to hold a dashboard to the metrics and labels
// that exist.
type Names struct {
	// Metrics are the metric names of the expression's selectors (and the
	// values of __name__="…" matchers).
	Metrics []string
	// NameRegexps are the values of __name__=~"…" matchers.
	NameRegexps []string
	// Matchers maps each selector's metric name ("" for one given by
	// __name__ or none) to the label names its matchers use.
	Matchers map[string][]string
	// Grouping are the labels of by, without, on, ignoring, group_left
	// and group_right clauses.
	Grouping []string
	// Functions are the functions and aggregations called.
	Functions []string
}

// functions are PromQL's aggregation operators and the functions the
// dashboards may reasonably call; another name followed by "(" is an error.
var functions = map[string]bool{}

func init() {
	for _, f := range strings.Fields(`sum min max avg group stddev stdvar count count_values bottomk topk quantile
		limitk limit_ratio abs absent absent_over_time ceil changes clamp clamp_max clamp_min day_of_month
		day_of_week day_of_year days_in_month delta deriv exp floor histogram_avg histogram_count
		histogram_fraction histogram_quantile histogram_stddev histogram_stdvar histogram_sum hour idelta
		increase irate label_join label_replace ln log10 log2 minute month predict_linear rate resets round
		scalar sgn sort sort_desc sort_by_label sort_by_label_desc sqrt time timestamp vector year
		avg_over_time min_over_time max_over_time sum_over_time count_over_time quantile_over_time
		stddev_over_time stdvar_over_time last_over_time present_over_time start end`) {
		functions[f] = true
	}
	for _, a := range strings.Fields("sum min max avg group stddev stdvar count count_values bottomk topk quantile limitk limit_ratio") {
		aggregations[a] = true
	}
}

var (
	aggregations  = map[string]bool{}
	groupingWords = map[string]bool{"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
	keywords      = map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "atan2": true, "inf": true, "nan": true}
)

type token struct {
	kind byte // 'i' identifier, 's' string, 'n' number or duration, 'p' bracket or comma, 'o' operator
	text string
}

// tokens splits expr into PromQL tokens.
func tokens(expr string) ([]token, error) {
	var out []token
	isIdent := func(c byte, first bool) bool {
		return c == '_' || c == ':' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || !first && '0' <= c && c <= '9'
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(expr) && expr[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(expr) && expr[j] != c; j++ {
				if expr[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(expr) {
				return nil, fmt.Errorf("unterminated string at offset %d", i)
			}
			out = append(out, token{'s', expr[i+1 : j]})
			i = j + 1
		case isIdent(c, true):
			j := i + 1
			for j < len(expr) && isIdent(expr[j], false) {
				j++
			}
			out = append(out, token{'i', expr[i:j]})
			i = j
		case '0' <= c && c <= '9' || c == '.':
			j := i + 1
			for j < len(expr) && (expr[j] == '.' || isIdent(expr[j], false) && expr[j] != ':') {
				j++
			}
			out = append(out, token{'n', expr[i:j]})
			i = j
		case strings.IndexByte("(){}[],", c) >= 0:
			out = append(out, token{'p', string(c)})
			i++
		case strings.IndexByte("=!~<>+-*/%^@:", c) >= 0:
			j := i + 1
			for j < len(expr) && strings.IndexByte("=~", expr[j]) >= 0 {
				j++
			}
			out = append(out, token{'o', expr[i:j]})
			i = j
		case c == '$':
			return nil, fmt.Errorf("unsubstituted variable at offset %d", i)
		default:
			return nil, fmt.Errorf("unexpected %q at offset %d", c, i)
		}
	}
	return out, nil
}

// Parse returns the names expr uses. It fails on unbalanced brackets, an
// unknown function, an unterminated string or a Grafana variable left in.
func Parse(expr string) (Names, error) {
	toks, err := tokens(expr)
	if err != nil {
		return Names{}, err
	}
	if len(toks) == 0 {
		return Names{}, fmt.Errorf("empty expression")
	}
	n := Names{Matchers: map[string][]string{}}
	var stack []byte // '(', '[', '{', or 'g' for a grouping clause's '('
	selector := ""   // the metric of the innermost '{'
	grouping := false
	next := func(i int) token {
		if i+1 < len(toks) {
			return toks[i+1]
		}
		return token{}
	}
	for i, t := range toks {
		top := byte(0)
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch t.kind {
		case 'p':
			switch t.text {
			case "(":
				if grouping {
					stack = append(stack, 'g')
				} else {
					stack = append(stack, '(')
				}
				grouping = false
			case "[", "{":
				stack = append(stack, t.text[0])
				if t.text == "{" {
					selector = ""
					if prev := toks[max(i-1, 0)]; i > 0 && prev.kind == 'i' && !keywords[strings.ToLower(prev.text)] {
						selector = toks[i-1].text
					}
				}
			case ")", "]", "}":
				want := map[string]byte{")": '(', "]": '[', "}": '{'}[t.text]
				if top == 'g' {
					top = '('
				}
				if len(stack) == 0 || top != want {
					return Names{}, fmt.Errorf("unbalanced %q (token %d)", t.text, i+1)
				}
				stack = stack[:len(stack)-1]
			}
		case 'i':
			switch {
			case top == '[': // a range or subquery: durations only
			case top == '{':
				n.Matchers[selector] = append(n.Matchers[selector], t.text)
				if t.text == "__name__" && next(i).kind == 'o' && i+2 < len(toks) && toks[i+2].kind == 's' {
					switch next(i).text {
					case "=":
						n.Metrics = append(n.Metrics, toks[i+2].text)
					case "=~":
						n.NameRegexps = append(n.NameRegexps, toks[i+2].text)
					}
				}
			case top == 'g':
				n.Grouping = append(n.Grouping, t.text)
			case groupingWords[strings.ToLower(t.text)]:
				grouping = next(i).text == "("
			case next(i).text == "(" || aggregations[t.text] && groupingWords[strings.ToLower(next(i).text)]:
				if !functions[t.text] {
					return Names{}, fmt.Errorf("unknown function %q", t.text)
				}
				n.Functions = append(n.Functions, t.text)
			case keywords[strings.ToLower(t.text)]:
			default:
				n.Metrics = append(n.Metrics, t.text)
			}
		}
	}
	if len(stack) > 0 {
		return Names{}, fmt.Errorf("unclosed %q", string(stack[len(stack)-1]))
	}
	return n, nil
}

// Labels returns every label name n uses, matchers and grouping, once.
func (n Names) Labels() []string {
	var out []string
	for _, ls := range n.Matchers {
		out = append(out, ls...)
	}
	out = append(out, n.Grouping...)
	slices.Sort(out)
	return slices.Compact(out)
}
