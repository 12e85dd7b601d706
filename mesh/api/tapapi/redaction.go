package tapapi

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/plexus-mesh/plexus/mesh/policy/percent"
)

// Redaction: what a tap's events hide, the one rule the proxies apply
// (sidecar/tap) when they build a request-start event.
//
// A header's value is shown as Redacted when its name is
//   - always redacted (AlwaysRedacted: authorization, cookie,
//     proxy-authorization), whatever the tap asks;
//   - listed by the tap (Request.RedactHeaders);
//   - redacted by default (DefaultRedactedHeaders, or ending in one of
//     DefaultRedactedHeaderSuffixes), unless the tap shows it
//     (Request.ShowHeaders).
//
// In the path's query string, the value of a parameter (the name is kept)
// is replaced by Redacted when the parameter's name, percent-decoded, is
// listed by the tap (Request.RedactQueryParams) or redacted by default
// (DefaultRedactedQueryParams, DefaultRedactedQueryParamSuffixes) and not
// shown by the tap (Request.ShowQueryParams). A bracketed name
// (user[password], token[]) is judged by each of its parts too.
//
// Names compare ignoring ASCII case and with '-' and '_' alike (a server
// may read X_Api_Key as X-Api-Key).
var (
	DefaultRedactedHeaders = []string{
		"x-api-key", "api-key", "apikey", "x-auth-token", "x-csrf-token", "x-xsrf-token",
		"x-amz-security-token", "x-goog-api-key", "x-functions-key", "ocp-apim-subscription-key",
		"set-cookie", "token", "secret", "password", "passwd",
	}
	DefaultRedactedHeaderSuffixes = []string{"-token", "-secret", "-password", "-api-key", "-apikey"}

	DefaultRedactedQueryParams = []string{
		"access_token", "id_token", "refresh_token", "token", "accesstoken",
		"api_key", "apikey", "key", "secret", "client_secret",
		"password", "passwd", "pwd", "signature", "sig", "code", "auth",
		"x-amz-signature", "x-amz-credential", "x-amz-security-token",
		"x-goog-signature", "x-goog-credential",
		"sessionid", "session_id", "jsessionid", "phpsessid",
	}
	DefaultRedactedQueryParamSuffixes = []string{"_token", "_secret", "_password", "_api_key", "_apikey", "_signature"}
)

// Redaction is a tap session's compiled rule. The nil *Redaction applies
// the defaults alone.
type Redaction struct {
	redactHeaders, showHeaders, redactParams, showParams []string
}

// NewRedaction compiles a session's lists: names to redact besides the
// defaults, and default names to show.
func NewRedaction(redactHeaders, showHeaders, redactQueryParams, showQueryParams []string) *Redaction {
	return &Redaction{redactHeaders: redactHeaders, showHeaders: showHeaders,
		redactParams: redactQueryParams, showParams: showQueryParams}
}

// IsAlwaysRedacted reports whether the value of header name is hidden
// from every tap (AlwaysRedacted), which nothing can show.
func IsAlwaysRedacted(name string) bool { return listed(AlwaysRedacted, name) }

// Header reports whether the value of header name (any case) is hidden.
func (r *Redaction) Header(name string) bool {
	switch {
	case IsAlwaysRedacted(name):
		return true
	case r != nil && listed(r.redactHeaders, name):
		return true
	case r != nil && listed(r.showHeaders, name):
		return false
	}
	return DefaultRedactedHeader(name)
}

// DefaultRedactedHeader reports whether header name is redacted by
// default (always redacted names included).
func DefaultRedactedHeader(name string) bool {
	return IsAlwaysRedacted(name) || listed(DefaultRedactedHeaders, name) || suffixed(DefaultRedactedHeaderSuffixes, name)
}

// DefaultRedactedQueryParam reports whether query parameter name
// (percent-decoded) is redacted by default.
func DefaultRedactedQueryParam(name string) bool {
	return listed(DefaultRedactedQueryParams, name) || suffixed(DefaultRedactedQueryParamSuffixes, name)
}

// QueryParam reports whether the value of query parameter name
// (percent-decoded) is hidden.
func (r *Redaction) QueryParam(name string) bool {
	switch {
	case r != nil && listed(r.redactParams, name):
		return true
	case r != nil && listed(r.showParams, name):
		return false // the whole name shown: its parts too
	case DefaultRedactedQueryParam(name):
		return true
	case !strings.ContainsAny(name, "[]"):
		return false
	}
	for part := range strings.FieldsFuncSeq(name, func(c rune) bool { return c == '[' || c == ']' }) {
		if r.queryParamPart(part) {
			return true
		}
	}
	return false
}

func (r *Redaction) queryParamPart(name string) bool {
	switch {
	case r != nil && listed(r.redactParams, name):
		return true
	case r != nil && listed(r.showParams, name):
		return false
	}
	return DefaultRedactedQueryParam(name)
}

// Path returns p with the values of its redacted parameters replaced by
// Redacted; p itself (nothing allocated) when none is. Parameters are
// those of the query string, separated by '&' or ';' (some servers take
// either), and the path's own ';' parameters (/cart;jsessionid=X/...,
// each ending at the next ';', '/' or the query); one without '=' or with
// an empty value has nothing to hide.
func (r *Redaction) Path(p string) string {
	q := strings.IndexByte(p, '?')
	if q < 0 {
		q = len(p)
	}
	var b []byte
	last := 0
	// param redacts p[i:j] when it names a redacted parameter.
	param := func(i, j int) {
		if eq := strings.IndexByte(p[i:j], '='); eq >= 0 && i+eq+1 < j && r.QueryParam(percent.Query(p[i:i+eq])) {
			if b == nil {
				b = make([]byte, 0, len(p)+len(Redacted))
			}
			b = append(append(b, p[last:i+eq+1]...), Redacted...)
			last = j
		}
	}
	for i := strings.IndexByte(p[:q], ';'); i >= 0 && i < q; {
		i++
		j := strings.IndexAny(p[i:q], ";/")
		if j < 0 {
			j = q
		} else {
			j += i
		}
		param(i, j)
		if j >= q || p[j] == ';' {
			i = j
			continue
		}
		k := strings.IndexByte(p[j:q], ';')
		if k < 0 {
			break
		}
		i = j + k
	}
	for i := q + 1; i < len(p); {
		j := strings.IndexAny(p[i:], "&;")
		if j < 0 {
			j = len(p)
		} else {
			j += i
		}
		param(i, j)
		i = j + 1
	}
	if b == nil {
		return p
	}
	return string(append(b, p[last:]...))
}

// ValidQueryParamName reports whether s may name a query parameter in a
// tap's lists: not empty, valid UTF-8, printable, no space and none of
// '&', ';', '=' (which would end it).
func ValidQueryParamName(s string) bool {
	if s == "" || !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if !unicode.IsGraphic(c) || unicode.IsSpace(c) || c == '&' || c == ';' || c == '=' {
			return false
		}
	}
	return true
}

// listed reports whether names holds name.
func listed(names []string, name string) bool {
	for _, n := range names {
		if sameName(n, name) {
			return true
		}
	}
	return false
}

// suffixed reports whether name ends with one of suffixes.
func suffixed(suffixes []string, name string) bool {
	for _, s := range suffixes {
		if len(name) > len(s) && sameName(s, name[len(name)-len(s):]) {
			return true
		}
	}
	return false
}

// sameName compares names ignoring ASCII case, with '-' and '_' alike.
func sameName(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if fold(a[i]) != fold(b[i]) {
			return false
		}
	}
	return true
}

func fold(c byte) byte {
	switch {
	case 'A' <= c && c <= 'Z':
		return c + 'a' - 'A'
	case c == '_':
		return '-'
	}
	return c
}
