package routes

import "strings"

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
		if unescapedEqual(key, name) {
			return value, true
		}
	}
	return "", false
}

// unescapedEqual reports whether raw decodes to want.
func unescapedEqual(raw, want string) bool {
	j := 0
	for i := 0; i < len(raw); j++ {
		c, n := unescapeAt(raw, i)
		if j >= len(want) || want[j] != c {
			return false
		}
		i += n
	}
	return j == len(want)
}

func appendUnescaped(b []byte, raw string) []byte {
	for i := 0; i < len(raw); {
		c, n := unescapeAt(raw, i)
		b = append(b, c)
		i += n
	}
	return b
}

// unescapeAt decodes the byte at raw[i] and says how many bytes it took.
func unescapeAt(raw string, i int) (byte, int) {
	switch c := raw[i]; c {
	case '+':
		return ' ', 1
	case '%':
		if i+2 < len(raw) && isHex(raw[i+1]) && isHex(raw[i+2]) {
			return unhex(raw[i+1])<<4 | unhex(raw[i+2]), 3
		}
		return c, 1
	default:
		return c, 1
	}
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c >= 'a':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}
