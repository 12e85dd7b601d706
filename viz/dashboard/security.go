package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// CSP is the Content-Security-Policy of every response: scripts, styles
// and connections from this origin only, no inline script or style, no
// framing, no base or form target elsewhere.
const CSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; frame-ancestors 'none'; form-action 'self'"

// DefaultAllowedHosts are the Host names always allowed (any port): the
// loopback names a port-forward uses. Not the Service's names: any pod
// of the cluster could then use the dashboard, and its live tap, with the
// dashboard's rights; --allowed-hosts opens it to a name on purpose.
var DefaultAllowedHosts = []string{"localhost", "127.0.0.1", "::1"}

// secure sets the security headers on every response, refuses a Host
// not allowed (a DNS-rebinding page's requests carry its own name) and
// any method but GET and HEAD (the dashboard changes nothing).
func (s *Server) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", CSP)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if !s.hostAllowed(r.Host) {
			http.Error(w, fmt.Sprintf("403 forbidden: the Host header %q is not one this dashboard answers to. "+
				"To defeat DNS rebinding, and other pods, it answers only to localhost, 127.0.0.1 and [::1] (plexusctl viz dashboard); "+
				"to reach it under another name, start plexus-control web with --allowed-hosts (a regular expression).", r.Host),
				http.StatusForbidden)
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "405 method not allowed: the dashboard is read-only", http.StatusMethodNotAllowed)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// hostAllowed reports whether a Host header names the dashboard: one of
// DefaultAllowedHosts or a match of Config.AllowedHosts, with any port.
func (s *Server) hostAllowed(host string) bool {
	name := host
	if h, _, err := net.SplitHostPort(host); err == nil {
		name = h
	}
	name = strings.TrimPrefix(strings.TrimSuffix(name, "]"), "[")
	name = strings.TrimSuffix(strings.ToLower(name), ".")
	if name == "" {
		return false
	}
	if slices.Contains(DefaultAllowedHosts, name) {
		return true
	}
	return s.allowed != nil && s.allowed.MatchString(name)
}
