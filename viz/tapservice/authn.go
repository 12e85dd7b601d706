package tapservice

import (
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/plexus-mesh/plexus/mesh/identity/pki"
)

// The tap service is an extension API server: the Kubernetes API server
// authenticates the caller and forwards the request with a client
// certificate of its aggregation layer (--proxy-client-cert-file), naming
// the caller in headers. Only that certificate makes the headers true.

// FrontProxy is the aggregation layer's authentication, as the API server
// publishes it in kube-system/extension-apiserver-authentication.
type FrontProxy struct {
	// CAs verify the API server's client certificate.
	CAs *x509.CertPool
	// AllowedNames are the accepted common names of that certificate;
	// none: any name the CAs signed.
	AllowedNames []string
	// Header names (defaults X-Remote-User, X-Remote-Group,
	// X-Remote-Extra-).
	UserHeaders, GroupHeaders, ExtraPrefixes []string
}

// FrontProxyFromConfigMap reads the requestheader-* keys of the
// extension-apiserver-authentication ConfigMap's data.
func FrontProxyFromConfigMap(data map[string]string) (*FrontProxy, error) {
	ca := data["requestheader-client-ca-file"]
	if ca == "" {
		return nil, errors.New("kube-system/extension-apiserver-authentication has no requestheader-client-ca-file: the API server runs without --requestheader-client-ca-file, so it cannot forward callers to an aggregated API")
	}
	certs, err := pki.ParseCerts([]byte(ca))
	if err != nil {
		return nil, fmt.Errorf("requestheader-client-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	fp := &FrontProxy{CAs: pool}
	for _, f := range []struct {
		key string
		dst *[]string
		def string
	}{
		{"requestheader-allowed-names", &fp.AllowedNames, ""},
		{"requestheader-username-headers", &fp.UserHeaders, "X-Remote-User"},
		{"requestheader-group-headers", &fp.GroupHeaders, "X-Remote-Group"},
		{"requestheader-extra-headers-prefix", &fp.ExtraPrefixes, "X-Remote-Extra-"},
	} {
		if v := data[f.key]; v != "" {
			if err := json.Unmarshal([]byte(v), f.dst); err != nil {
				return nil, fmt.Errorf("%s=%q: want a JSON list of strings: %w", f.key, v, err)
			}
		}
		if len(*f.dst) == 0 && f.def != "" {
			*f.dst = []string{f.def}
		}
	}
	return fp, nil
}

// User is the caller the API server forwarded.
type User struct {
	Name   string
	Groups []string
	Extra  map[string][]string
}

// errUnauthenticated: the request did not come from the API server's
// aggregation layer.
var errUnauthenticated = errors.New("not forwarded by the Kubernetes API server: the client certificate is missing or not the aggregation layer's")

// Authenticate returns the caller of r, or an error when r's client
// certificate is not the aggregation layer's.
func (fp *FrontProxy) Authenticate(r *http.Request) (User, error) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		return User{}, errUnauthenticated
	}
	certs := r.TLS.PeerCertificates
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	if _, err := certs[0].Verify(x509.VerifyOptions{Roots: fp.CAs, Intermediates: inter,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return User{}, fmt.Errorf("%w: %v", errUnauthenticated, err)
	}
	if len(fp.AllowedNames) > 0 && !slices.Contains(fp.AllowedNames, certs[0].Subject.CommonName) {
		return User{}, fmt.Errorf("%w: common name %q is not among the allowed names", errUnauthenticated, certs[0].Subject.CommonName)
	}
	var u User
	for _, h := range fp.UserHeaders {
		if v := r.Header.Get(h); v != "" {
			u.Name = v
			break
		}
	}
	if u.Name == "" {
		return User{}, errors.New("the API server forwarded no user name")
	}
	for _, h := range fp.GroupHeaders {
		u.Groups = append(u.Groups, r.Header.Values(h)...)
	}
	for name, vv := range r.Header {
		for _, p := range fp.ExtraPrefixes {
			if len(name) > len(p) && strings.EqualFold(name[:len(p)], p) {
				key, err := url.PathUnescape(strings.ToLower(name[len(p):]))
				if err != nil {
					continue
				}
				if u.Extra == nil {
					u.Extra = map[string][]string{}
				}
				u.Extra[key] = append(u.Extra[key], vv...)
			}
		}
	}
	return u, nil
}
