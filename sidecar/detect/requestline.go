package detect

import "errors"

// ErrShort means the input is a valid prefix of a request line but ends
// before its line terminator.
var ErrShort = errors.New("request line incomplete")

// errNotHTTP1 means the input cannot be the start of an HTTP/1.x request.
var errNotHTTP1 = errors.New("not an HTTP/1.x request line")

// RequestLine is a parsed HTTP/1.x request line (RFC 9112 §3). Its fields
// alias the parsed input.
type RequestLine struct {
	Method []byte
	Target []byte
	Minor  byte // the x in HTTP/1.x, as a digit character
}

// maxMethod bounds the method token; registered methods are far shorter.
const maxMethod = 32

// ParseRequestLine parses "method SP request-target SP HTTP/1.d CRLF" (a
// bare LF is accepted as RFC 9112 §2.2 allows) at the start of b. It
// returns the line and its length including the terminator, ErrShort when
// b is a valid but incomplete prefix, or another error when it is not one.
// It never reads past b and does not allocate.
func ParseRequestLine(b []byte) (RequestLine, int, error) {
	var rl RequestLine
	i := 0
	for i < len(b) && IsTchar(b[i]) {
		i++
		if i > maxMethod {
			return rl, 0, errNotHTTP1
		}
	}
	if i == len(b) {
		return rl, 0, ErrShort
	}
	if i == 0 || b[i] != ' ' {
		return rl, 0, errNotHTTP1
	}
	rl.Method = b[:i]
	i++
	start := i
	for i < len(b) && b[i] > ' ' && b[i] < 0x7f {
		i++
	}
	if i == len(b) {
		return rl, 0, ErrShort
	}
	if i == start || b[i] != ' ' {
		return rl, 0, errNotHTTP1
	}
	rl.Target = b[start:i]
	i++
	const version = "HTTP/1."
	rest := b[i:]
	if len(rest) <= len(version) {
		if hasPrefix(version, rest) {
			return rl, 0, ErrShort
		}
		return rl, 0, errNotHTTP1
	}
	if string(rest[:len(version)]) != version || rest[len(version)] < '0' || rest[len(version)] > '9' {
		return rl, 0, errNotHTTP1
	}
	rl.Minor = rest[len(version)]
	i += len(version) + 1
	switch {
	case i == len(b):
		return rl, 0, ErrShort
	case b[i] == '\n':
		return rl, i + 1, nil
	case b[i] != '\r':
		return rl, 0, errNotHTTP1
	case i+1 == len(b):
		return rl, 0, ErrShort
	case b[i+1] == '\n':
		return rl, i + 2, nil
	default:
		return rl, 0, errNotHTTP1
	}
}

// IsTchar reports whether c may appear in an HTTP token (RFC 9110 §5.6.2).
func IsTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}

// hasPrefix reports whether b is a prefix of s, without allocating.
func hasPrefix(s string, b []byte) bool {
	return len(b) <= len(s) && s[:len(b)] == string(b)
}
