package pathnorm

import (
	"net/url"
	"strings"
	"testing"
)

// spellings of paths an application may read as /admin, and others: each
// is normalised (Target), then either unambiguous (what routes compare,
// Decode, is given) or refused where paths decide (Ambiguous names why).
var spellings = []struct {
	in, normal, ambiguous string
	invalid               bool
}{
	{in: "/admin", normal: "/admin"},
	{in: "/%61dmin", normal: "/admin"},
	{in: "/ad%6din", normal: "/admin"},
	{in: "/ad%6Din", normal: "/admin"},
	{in: "/%41DMIN", normal: "/ADMIN"}, // case is the application's: never folded
	{in: "/ADMIN", normal: "/ADMIN"},
	{in: "/admin/", normal: "/admin/"},
	{in: "/admin?x=%61", normal: "/admin?x=%61"}, // the query is left alone
	{in: "/admin;x", normal: "/admin;x", ambiguous: PathParameter},
	{in: "/admin;x/y", normal: "/admin;x/y", ambiguous: PathParameter},
	{in: "/public/..;/admin", normal: "/public/..;/admin", ambiguous: PathParameter},
	{in: "/public/..%2Fadmin", normal: "/public/..%2Fadmin", ambiguous: EncodedSlash},
	{in: "/public%2F..%2Fadmin", normal: "/public%2F..%2Fadmin", ambiguous: EncodedSlash},
	{in: "/admin%2fx", normal: "/admin%2Fx", ambiguous: EncodedSlash},
	{in: "/admin%5Cx", normal: "/admin%5Cx", ambiguous: EncodedSlash},
	{in: "/admin%5cx", normal: "/admin%5Cx", ambiguous: EncodedSlash},
	{in: "/public/%2e%2e/admin", normal: "/public/../admin", ambiguous: DotSegment},
	{in: "/public/%2E%2E/admin", normal: "/public/../admin", ambiguous: DotSegment},
	{in: "/public/.%2e/admin", normal: "/public/../admin", ambiguous: DotSegment},
	{in: "/public/../admin", normal: "/public/../admin", ambiguous: DotSegment},
	{in: "/./admin", normal: "/./admin", ambiguous: DotSegment},
	{in: "/admin/..", normal: "/admin/..", ambiguous: DotSegment},
	{in: "//admin", normal: "//admin", ambiguous: EmptySegment},
	{in: "/public//admin", normal: "/public//admin", ambiguous: EmptySegment},
	{in: "/public\\..\\admin", normal: "/public\\..\\admin", ambiguous: Backslash},
	{in: "/%2561dmin", normal: "/%2561dmin", ambiguous: DoubleEncoding},
	{in: "/admin%00", normal: "/admin%00", ambiguous: EncodedControl},
	{in: "/admin%0a", normal: "/admin%0A", ambiguous: EncodedControl},
	{in: "/admin#x", normal: "/admin#x", ambiguous: Fragment},
	{in: "/admin%20", normal: "/admin%20"},
	{in: "/admin%3Bx", normal: "/admin%3Bx"}, // an encoded ";" is data
	{in: "/users%3abatchGet", normal: "/users%3AbatchGet"},
	{in: "/%7euser", normal: "/~user"},
	{in: "/a%2bb", normal: "/a%2Bb"},
	{in: "/admin/...", normal: "/admin/..."},
	{in: "/caf%C3%A9", normal: "/caf%C3%A9"},
	{in: "*", normal: "*"},
	{in: "http://host/%61dmin", normal: "http://host/%61dmin"}, // absolute form: matched on its path as it is
	{in: "/a%zz", invalid: true},
	{in: "/a%u0041", invalid: true},
	{in: "/a%", invalid: true},
	{in: "/a%2", invalid: true},
}

func TestSpellings(t *testing.T) {
	for _, tc := range spellings {
		got, err := Target(tc.in)
		if tc.invalid {
			if err == nil {
				t.Errorf("Target(%q) = %q, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.normal {
			t.Errorf("Target(%q) = %q, %v; want %q", tc.in, got, err, tc.normal)
			continue
		}
		if a := Ambiguous(got); a != tc.ambiguous {
			t.Errorf("Ambiguous(%q) = %q, want %q", got, a, tc.ambiguous)
		}
	}
}

func TestTargetDoesNotAllocateWhenNormal(t *testing.T) {
	for _, in := range []string{"/books/1?x=%zz", "/a%2Fb", "/caf%C3%A9"} {
		if n := testing.AllocsPerRun(100, func() { Target(in) }); n != 0 {
			t.Errorf("Target(%q): %v allocations, want 0", in, n)
		}
	}
}

func TestSetURL(t *testing.T) {
	for _, target := range []string{"/admin", "/users%3AbatchGet?x=1", "/a%2Fb?", "/caf%C3%A9"} {
		u, _ := url.Parse("http://host/old?q")
		SetURL(u, target)
		if got := u.RequestURI(); got != target {
			t.Errorf("SetURL(%q): RequestURI %q", target, got)
		}
	}
}

// FuzzTarget: normalising twice changes nothing; normalisation never
// changes what an application reads (the decoded path); what is
// forwarded (net/http's RequestURI after SetURL) is the normal target
// decided on; an unambiguous path has no dot or empty segment, no
// encoded slash, and no ";", "\" or "#".
func FuzzTarget(f *testing.F) {
	for _, tc := range spellings {
		f.Add(tc.in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		n, err := Target(in)
		if err != nil {
			return
		}
		n2, err := Target(n)
		if err != nil || n2 != n {
			t.Fatalf("Target(Target(%q)) = %q, %v; want %q", in, n2, err, n)
		}
		if !strings.HasPrefix(in, "/") {
			if n != in {
				t.Fatalf("Target(%q) = %q, want it unchanged", in, n)
			}
			return
		}
		p, _, _ := strings.Cut(in, "?")
		np, _, _ := strings.Cut(n, "?")
		if a, err := url.PathUnescape(p); err == nil {
			if b := Decode(np); a != b {
				t.Fatalf("Target(%q) changed the decoded path %q to %q", in, a, b)
			}
		}
		// Whatever net/http itself would forward unchanged, SetURL forwards
		// unchanged.
		if pu, err := url.ParseRequestURI(n); err == nil && pu.RequestURI() == n {
			u := &url.URL{}
			if SetURL(u, n); u.RequestURI() != n {
				t.Fatalf("SetURL(%q): forwarded as %q", n, u.RequestURI())
			}
		}
		if Ambiguous(n) != "" {
			return
		}
		d := Decode(np)
		for _, seg := range strings.Split(d, "/")[1:] {
			if seg == "." || seg == ".." {
				t.Fatalf("unambiguous %q has a dot segment once decoded (%q)", n, d)
			}
		}
		if strings.Contains(strings.TrimSuffix(np, "/"), "//") || strings.ContainsAny(np, ";\\#") ||
			strings.Contains(np, "%2F") || strings.Contains(np, "%5C") {
			t.Fatalf("unambiguous %q", n)
		}
	})
}
