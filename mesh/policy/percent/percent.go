// Package percent decodes URL percent-encoding leniently, as servers do:
// "%XX" with two hex digits is the byte XX, and a malformed escape stands
// for itself instead of failing (net/url refuses it). In a query "+" is a
// space. Route matching, path normalization and the tap's redaction read
// bytes through it, so that they all decode a request alike.
package percent

// IsHex reports whether c is a hex digit, in either case.
func IsHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// Byte is the byte the hex digits hi and lo spell (IsHex of both).
func Byte(hi, lo byte) byte { return unhex(hi)<<4 | unhex(lo) }

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// EscapeAt reports whether s[i] starts a well-formed escape "%XX".
func EscapeAt(s string, i int) bool {
	return s[i] == '%' && i+2 < len(s) && IsHex(s[i+1]) && IsHex(s[i+2])
}

// QueryByteAt decodes the query byte at raw[i] and says how many bytes of
// raw it took: 3 for "%XX", 1 for anything else ("+" is a space).
func QueryByteAt(raw string, i int) (byte, int) {
	switch c := raw[i]; {
	case c == '+':
		return ' ', 1
	case EscapeAt(raw, i):
		return Byte(raw[i+1], raw[i+2]), 3
	default:
		return c, 1
	}
}

// AppendQuery appends raw, a query's name or value, decoded to b.
func AppendQuery(b []byte, raw string) []byte {
	for i := 0; i < len(raw); {
		c, n := raw[i], 1
		if c == '+' || c == '%' {
			c, n = QueryByteAt(raw, i)
		}
		b = append(b, c)
		i += n
	}
	return b
}

// QueryEqual reports whether raw, a query's name or value, decodes to
// want, without allocating.
func QueryEqual(raw, want string) bool {
	j := 0
	for i := 0; i < len(raw); j++ {
		c, n := raw[i], 1 // the plain byte inline: most names have no escape
		if c == '+' || c == '%' {
			c, n = QueryByteAt(raw, i)
		}
		if j >= len(want) || want[j] != c {
			return false
		}
		i += n
	}
	return j == len(want)
}

// Query decodes raw, a query's name or value.
func Query(raw string) string {
	for i := 0; i < len(raw); i++ {
		if raw[i] == '%' || raw[i] == '+' {
			return string(AppendQuery(make([]byte, 0, len(raw)), raw))
		}
	}
	return raw
}
