// Package pathnorm is the proxy's one rule for request paths: every
// engine (the HTTP/1 fast path, net/http's HTTP/1 and HTTP/2, gRPC), in
// both directions and on the admin port, puts a request's target in
// normal form before anything looks at it, decides on that form, and
// forwards it.
//
// The normal form is RFC 3986 §6.2.2's syntax-based normalisation of the
// path: a percent-encoded unreserved character (A-Z a-z 0-9 - . _ ~) is
// decoded ("/%61dmin" is "/admin"), the hex digits of every other
// encoding are upper case ("%2f" is "%2F"); an invalid encoding ("%zz")
// is an error. Both spellings mean the same resource to every
// application, so this changes nothing an application reads. The query
// is left as it is.
//
// What normalisation cannot settle is ambiguous: spellings that one
// application reads as another path and another does not (Ambiguous).
// Where a decision depends on the path -- a port whose inbound policy has
// routes, a destination whose routes match on paths -- such a request is
// refused (400 invalid-path) rather than guessed at. Elsewhere it is
// forwarded in normal form, so a mesh with no path rules breaks no
// application that uses them (an encoded "/" in a RabbitMQ vhost, a
// ";jsessionid").
package pathnorm

import (
	"errors"
	"net/url"
	"strings"

	"github.com/plexus-mesh/plexus/mesh/policy/percent"
)

// ErrInvalidEncoding: a "%" not followed by two hex digits.
var ErrInvalidEncoding = errors.New("a % not followed by two hex digits")

// Target returns target with its path in normal form, or
// ErrInvalidEncoding. A target that does not start with "/" (OPTIONS's
// "*", an absolute-form URI) is returned as it is. An already normal
// target is returned itself, without allocating.
func Target(target string) (string, error) {
	if target == "" || target[0] != '/' {
		return target, nil
	}
	path, _, _ := strings.Cut(target, "?")
	i := strings.IndexByte(path, '%')
	if i < 0 {
		return target, nil
	}
	// Check first: most encodings are already normal.
	normal := true
	for j := i; j < len(path); j++ {
		if path[j] != '%' {
			continue
		}
		if !percent.EscapeAt(path, j) {
			return "", ErrInvalidEncoding
		}
		if c := percent.Byte(path[j+1], path[j+2]); unreserved(c) || isLowerHex(path[j+1]) || isLowerHex(path[j+2]) {
			normal = false
		}
		j += 2
	}
	if normal {
		return target, nil
	}
	var b strings.Builder
	b.Grow(len(target))
	b.WriteString(path[:i])
	for j := i; j < len(path); j++ {
		c := path[j]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		d := percent.Byte(path[j+1], path[j+2])
		if unreserved(d) {
			b.WriteByte(d)
		} else {
			b.WriteByte('%')
			b.WriteByte(upperHex[d>>4])
			b.WriteByte(upperHex[d&15])
		}
		j += 2
	}
	b.WriteString(target[len(path):])
	return b.String(), nil
}

// Reasons a normal target is ambiguous (Ambiguous).
const (
	PathParameter   = "path-parameter"   // ";": /admin;x is /admin to Tomcat, Spring, Jetty
	Backslash       = "backslash"        // "\": a separator to some servers (IIS, ASP.NET)
	Fragment        = "fragment"         // "#": never in a request target; some parsers cut the path there
	EncodedSlash    = "encoded-slash"    // "%2F" or "%5C": one segment or two, as the application decides
	DoubleEncoding  = "double-encoding"  // "%25" and two hex digits: another path once decoded twice
	EncodedControl  = "encoded-control"  // "%00"-"%1F", "%7F": some applications end the path there
	DotSegment      = "dot-segment"      // "." or "..": another path once resolved
	EmptySegment    = "empty-segment"    // "//": another path once merged
	InvalidEncoding = "invalid-encoding" // "%zz": not normal (Target refuses it)
)

// Ambiguous returns why a normal target's path (see Target) could name
// another path to some application, or "" when it could not. Only a
// single trailing "/" may end in an empty segment; "..." and "%3B" (an
// encoded ";", which is data) are not ambiguous.
func Ambiguous(target string) string {
	if target == "" || target[0] != '/' {
		return ""
	}
	path, _, _ := strings.Cut(target, "?")
	for i := 0; i < len(path); i++ {
		switch path[i] {
		case ';':
			return PathParameter
		case '\\':
			return Backslash
		case '#':
			return Fragment
		case '%':
			if !percent.EscapeAt(path, i) {
				return InvalidEncoding
			}
			switch c := percent.Byte(path[i+1], path[i+2]); {
			case c == '/' || c == '\\':
				return EncodedSlash
			case c == '%' && i+4 < len(path) && percent.IsHex(path[i+3]) && percent.IsHex(path[i+4]):
				return DoubleEncoding
			case c < 0x20 || c == 0x7f:
				return EncodedControl
			}
			i += 2
		}
	}
	for i := 1; i <= len(path); {
		j := strings.IndexByte(path[i:], '/')
		if j < 0 {
			j = len(path) - i
		}
		switch seg := path[i : i+j]; {
		case seg == "." || seg == "..":
			return DotSegment
		case seg == "" && i+j < len(path):
			return EmptySegment
		}
		i += j + 1
	}
	return ""
}

// Decode returns a path as an application reads it, every encoding
// decoded; routes compare it, so "/users%3AbatchGet" matches a route for
// "/users:batchGet". A path without "%" is returned itself. An invalid
// encoding is kept as it is.
func Decode(path string) string {
	if strings.IndexByte(path, '%') < 0 {
		return path
	}
	if p, err := url.PathUnescape(path); err == nil {
		return p
	}
	return path
}

// SetURL points u at a normal target (path and query), so that
// u.RequestURI() is target: what is forwarded is what was decided on.
func SetURL(u *url.URL, target string) {
	path, query, hasQuery := strings.Cut(target, "?")
	u.Opaque = ""
	u.RawQuery, u.ForceQuery = query, hasQuery && query == ""
	if p, err := url.PathUnescape(path); err == nil {
		u.Path, u.RawPath = p, path
	} else {
		u.Path, u.RawPath = path, ""
	}
}

const upperHex = "0123456789ABCDEF"

func unreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~'
}

func isLowerHex(c byte) bool { return 'a' <= c && c <= 'f' }
