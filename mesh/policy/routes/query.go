package routes

import (
	"strings"

	"github.com/plexus-mesh/plexus/mesh/policy/percent"
)

// The query is read in place, without allocating: pairs separated by '&',
// key and value by the first '=', "+" and "%XX" decoded as
// url.ParseQuery does (an invalid escape stands for itself).

// queryValue returns the raw (still escaped) value of the first parameter
// named name in a raw query.
func queryValue(query, name string) (raw string, ok bool) {
	for query != "" {
		var pair string
		if i := strings.IndexByte(query, '&'); i >= 0 {
			pair, query = query[:i], query[i+1:]
		} else {
			pair, query = query, ""
		}
		key, value, _ := strings.Cut(pair, "=")
		if percent.QueryEqual(key, name) {
			return value, true
		}
	}
	return "", false
}
