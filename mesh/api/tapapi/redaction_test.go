package tapapi

import (
	"strings"
	"testing"
)

// TestDefaultRedactedHeaders: headers that commonly carry secrets are
// redacted with no list from the tap; others are not.
func TestDefaultRedactedHeaders(t *testing.T) {
	var r *Redaction // the defaults alone
	for _, n := range []string{
		"Authorization", "cookie", "Proxy-Authorization", "proxy_authorization",
		"X-Api-Key", "api-key", "APIKEY", "x-auth-token", "X-CSRF-Token", "x-xsrf-token", "x-amz-security-token",
		"x-goog-api-key", "Set-Cookie", "x-vault-token", "Private-Token", "x-client-secret", "x-db-password",
		"x-custom-api-key", "x-custom-apikey", "X_Api_Key", "x_session_token", "token", "password",
	} {
		if !r.Header(n) {
			t.Errorf("header %s: shown, want redacted by default", n)
		}
	}
	for _, n := range []string{"accept", "user-agent", "content-type", "x-request-id", "tokens", "x-token-count", "host", "keys"} {
		if r.Header(n) {
			t.Errorf("header %s: redacted, want shown", n)
		}
	}
}

// TestRedactionLists: a tap widens the defaults (redact) and narrows them
// (show), but never shows an always-redacted header, and a name it both
// redacts and shows stays redacted.
func TestRedactionLists(t *testing.T) {
	r := NewRedaction([]string{"X-Tenant", "x-both"}, []string{"x-api-key", "Authorization", "COOKIE", "proxy-authorization", "x-both", "x-session-token"},
		[]string{"tenant", "Both"}, []string{"CODE", "both", "access_token"})
	for n, want := range map[string]bool{
		"x-tenant": true, "X-TENANT": true, "x-both": true, // listed
		"x-api-key": false, "X-Session-Token": false, // shown
		"authorization": true, "cookie": true, "proxy-authorization": true, "Proxy_Authorization": true, // never shown
		"x-auth-token": true, "accept": false, // defaults
	} {
		if got := r.Header(n); got != want {
			t.Errorf("header %s: redacted %v, want %v", n, got, want)
		}
	}
	for n, want := range map[string]bool{
		"tenant": true, "both": true, "code": false, "Access_Token": false, "id_token": true, "page": false,
	} {
		if got := r.QueryParam(n); got != want {
			t.Errorf("query parameter %s: redacted %v, want %v", n, got, want)
		}
	}
}

// TestRedactPath: the values of the query's secret parameters are
// replaced, their names and every other byte kept.
func TestRedactPath(t *testing.T) {
	var r *Redaction
	for in, want := range map[string]string{
		"/books":                   "/books",
		"/books?":                  "/books?",
		"/books?page=2&sort=title": "/books?page=2&sort=title",
		"/cb?code=abc&state=xyz":   "/cb?code=REDACTED&state=xyz",
		"/x?access_token=eyJhbGciOi.x.y&page=1&api_key=k1;sig=s&Token=T":                           "/x?access_token=REDACTED&page=1&api_key=REDACTED;sig=REDACTED&Token=REDACTED",
		"/s3/obj?X-Amz-Credential=AKIA%2F20260101&X-Amz-Signature=abc123&X-Amz-Security-Token=FQo": "/s3/obj?X-Amz-Credential=REDACTED&X-Amz-Signature=REDACTED&X-Amz-Security-Token=REDACTED",
		"/g?X-Goog-Signature=0a1b&x-goog-credential=c":                                             "/g?X-Goog-Signature=REDACTED&x-goog-credential=REDACTED",
		"/x?password=&pwd&passwd==":                                                                "/x?password=&pwd&passwd=REDACTED", // empty: nothing to hide
		"/x?access%5Ftoken=a&acc%65ss_token=b&a+b=c":                                               "/x?access%5Ftoken=REDACTED&acc%65ss_token=REDACTED&a+b=c",
		"/x?user[password]=p&token[]=t&tags[]=a":                                                   "/x?user[password]=REDACTED&token[]=REDACTED&tags[]=a",
		"/x?github_token=g&client-secret=c&my_api_key=k&keys=1":                                    "/x?github_token=REDACTED&client-secret=REDACTED&my_api_key=REDACTED&keys=1",
		"/x?a=1?token=t":                 "/x?a=1?token=t", // a=1?token=t is one parameter, a
		"/x?token=%zz&b":                 "/x?token=REDACTED&b",
		"/x?key=k#frag=1":                "/x?key=REDACTED",
		"http://h/p?secret=s&x=1":        "http://h/p?secret=REDACTED&x=1",
		"/cart;jsessionid=ABC/items?x=1": "/cart;jsessionid=REDACTED/items?x=1", // the path's own parameters
		"/a;v=1;token=t/b;c=2?token=q":   "/a;v=1;token=REDACTED/b;c=2?token=REDACTED",
		"/a;jsessionid=S":                "/a;jsessionid=REDACTED",
		"/a/b;x=1/c;secret=s;y/d":        "/a/b;x=1/c;secret=REDACTED;y/d",
	} {
		if got := r.Path(in); got != want {
			t.Errorf("Path(%q) = %q, want %q", in, got, want)
		}
	}
	shown := NewRedaction(nil, nil, []string{"tenant"}, []string{"code", "user[password]"})
	if got, want := shown.Path("/cb?code=abc&tenant=t&user[password]=p&token=x"), "/cb?code=abc&tenant=REDACTED&user[password]=p&token=REDACTED"; got != want {
		t.Errorf("with lists: %q, want %q", got, want)
	}
	// Nothing to redact: the same string, nothing allocated.
	p := "/books?page=2&sort=title"
	if n := testing.AllocsPerRun(100, func() { _ = r.Path(p) }); n != 0 {
		t.Errorf("a path with nothing to redact allocated %v times", n)
	}
}

func TestValidQueryParamName(t *testing.T) {
	for _, n := range []string{"token", "X-Amz-Signature", "user[password]", "令牌", "a.b"} {
		if !ValidQueryParamName(n) {
			t.Errorf("%q refused", n)
		}
	}
	for _, n := range []string{"", "a b", "a=b", "a&b", "a;b", "a\nb", "\xff", "a\tb"} {
		if ValidQueryParamName(n) {
			t.Errorf("%q accepted", n)
		}
	}
}

// FuzzRedactPath: whatever the path, a default secret parameter's value
// never survives, and only values change.
func FuzzRedactPath(f *testing.F) {
	f.Add("/x?access_token=abc&b=1", "abc")
	f.Add("/x?a%3Dtoken=1;token=zz", "zz")
	f.Fuzz(func(t *testing.T, prefix, secret string) {
		if secret == "" || strings.ContainsAny(secret, "&;#") {
			return
		}
		var r *Redaction
		p := prefix + "?access_token=" + secret
		if strings.ContainsRune(prefix, '?') {
			p = prefix + "&access_token=" + secret
		}
		got := r.Path(p)
		if strings.HasSuffix(got, "access_token="+secret) && secret != Redacted {
			t.Fatalf("Path(%q) = %q: the token's value survived", p, got)
		}
	})
}
