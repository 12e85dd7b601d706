// Package kubeconfig reads what one API request needs from a kubeconfig
// file (server, CA, client certificate, bearer token) without client-go,
// and refuses what it cannot honour (exec plugins, auth providers, basic
// auth, impersonation, proxy-url) with an error naming it.
package kubeconfig

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Config is the current context of a kubeconfig, resolved.
type Config struct {
	// Server is the API server's base URL (it may carry a path prefix).
	Server *url.URL
	// TLS verifies the server and presents the client certificate, if any.
	TLS *tls.Config
	// BearerToken is sent as "Authorization: Bearer"; empty for none. A
	// tokenFile is read when the kubeconfig is loaded.
	BearerToken string
}

// The parts of the file format (clientcmd's v1 Config) we read. Fields we
// cannot honour are kept raw so that their presence can be reported.
type file struct {
	CurrentContext string `json:"current-context"`
	Clusters       []struct {
		Name    string  `json:"name"`
		Cluster cluster `json:"cluster"`
	} `json:"clusters"`
	Users []struct {
		Name string `json:"name"`
		User user   `json:"user"`
	} `json:"users"`
	Contexts []struct {
		Name    string `json:"name"`
		Context struct {
			Cluster string `json:"cluster"`
			User    string `json:"user"`
		} `json:"context"`
	} `json:"contexts"`
}

type cluster struct {
	Server                   string          `json:"server"`
	TLSServerName            string          `json:"tls-server-name"`
	InsecureSkipTLSVerify    bool            `json:"insecure-skip-tls-verify"`
	CertificateAuthority     string          `json:"certificate-authority"`
	CertificateAuthorityData []byte          `json:"certificate-authority-data"`
	ProxyURL                 json.RawMessage `json:"proxy-url"`
}

type user struct {
	ClientCertificate     string `json:"client-certificate"`
	ClientCertificateData []byte `json:"client-certificate-data"`
	ClientKey             string `json:"client-key"`
	ClientKeyData         []byte `json:"client-key-data"`
	Token                 string `json:"token"`
	TokenFile             string `json:"tokenFile"`

	// Unsupported: present means an error.
	Exec         json.RawMessage `json:"exec"`
	AuthProvider json.RawMessage `json:"auth-provider"`
	Username     json.RawMessage `json:"username"`
	Password     json.RawMessage `json:"password"`
	As           json.RawMessage `json:"as"`
	AsUID        json.RawMessage `json:"as-uid"`
	AsGroups     json.RawMessage `json:"as-groups"`
	AsUserExtra  json.RawMessage `json:"as-user-extra"`
}

// Load reads the kubeconfig at path and resolves its current context.
// Relative file names in it are taken relative to the file's directory, as
// kubectl does.
func Load(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading kubeconfig: %w", err)
	}
	c, err := Parse(data, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return c, nil
}

// Parse resolves the current context of a kubeconfig's contents; dir is
// where relative file names point.
func Parse(data []byte, dir string) (*Config, error) {
	var f file
	if err := yaml.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("decoding: %w", err)
	}
	if f.CurrentContext == "" {
		return nil, errors.New("no current-context")
	}
	ctxIdx := -1
	for i, c := range f.Contexts {
		if c.Name == f.CurrentContext {
			ctxIdx = i
		}
	}
	if ctxIdx < 0 {
		return nil, fmt.Errorf("current-context %q is not among its contexts", f.CurrentContext)
	}
	ctx := f.Contexts[ctxIdx].Context
	var cl *cluster
	for i := range f.Clusters {
		if f.Clusters[i].Name == ctx.Cluster {
			cl = &f.Clusters[i].Cluster
		}
	}
	if cl == nil {
		return nil, fmt.Errorf("context %q names cluster %q, which is not among its clusters", f.CurrentContext, ctx.Cluster)
	}
	u := &user{}
	if ctx.User != "" {
		u = nil
		for i := range f.Users {
			if f.Users[i].Name == ctx.User {
				u = &f.Users[i].User
			}
		}
		if u == nil {
			return nil, fmt.Errorf("context %q names user %q, which is not among its users", f.CurrentContext, ctx.User)
		}
	}
	c := &Config{TLS: &tls.Config{NextProtos: []string{"http/1.1"}}}
	if err := c.setCluster(ctx.Cluster, cl, dir); err != nil {
		return nil, err
	}
	if err := c.setUser(ctx.User, u, dir); err != nil {
		return nil, err
	}
	return c, nil
}

func (c *Config) setCluster(name string, cl *cluster, dir string) error {
	if cl.Server == "" {
		return fmt.Errorf("cluster %q has no server", name)
	}
	srv, err := url.Parse(cl.Server)
	if err != nil {
		return fmt.Errorf("cluster %q: server: %w", name, err)
	}
	if (srv.Scheme != "https" && srv.Scheme != "http") || srv.Host == "" {
		return fmt.Errorf("cluster %q: server %q is not an http(s) URL", name, cl.Server)
	}
	if len(cl.ProxyURL) > 0 {
		return fmt.Errorf("cluster %q: proxy-url is not supported by plexus-cni", name)
	}
	c.Server = srv
	c.TLS.ServerName = cl.TLSServerName
	ca := cl.CertificateAuthorityData
	switch {
	case len(ca) > 0 && cl.CertificateAuthority != "":
		return fmt.Errorf("cluster %q sets both certificate-authority and certificate-authority-data", name)
	case cl.CertificateAuthority != "":
		if ca, err = os.ReadFile(resolve(dir, cl.CertificateAuthority)); err != nil {
			return fmt.Errorf("cluster %q: certificate-authority: %w", name, err)
		}
	}
	if len(ca) == 0 {
		// No CA: the system's roots, as client-go does.
		c.TLS.InsecureSkipVerify = cl.InsecureSkipTLSVerify
		return nil
	}
	if cl.InsecureSkipTLSVerify {
		return fmt.Errorf("cluster %q sets both a certificate authority and insecure-skip-tls-verify", name)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return fmt.Errorf("cluster %q: the certificate authority holds no PEM certificate", name)
	}
	c.TLS.RootCAs = pool
	return nil
}

func (c *Config) setUser(name string, u *user, dir string) error {
	for _, f := range []struct {
		key string
		raw json.RawMessage
	}{
		{"exec (credential plugin)", u.Exec}, {"auth-provider", u.AuthProvider},
		{"username (basic auth)", u.Username}, {"password (basic auth)", u.Password},
		{"as (impersonation)", u.As}, {"as-uid (impersonation)", u.AsUID},
		{"as-groups (impersonation)", u.AsGroups}, {"as-user-extra (impersonation)", u.AsUserExtra},
	} {
		if len(f.raw) > 0 && string(f.raw) != "null" {
			return fmt.Errorf("user %q uses %s, which plexus-cni does not support; use a token, tokenFile or client certificate", name, f.key)
		}
	}
	cert, err := material(name, "client-certificate", u.ClientCertificate, u.ClientCertificateData, dir)
	if err != nil {
		return err
	}
	key, err := material(name, "client-key", u.ClientKey, u.ClientKeyData, dir)
	if err != nil {
		return err
	}
	switch {
	case len(cert) > 0 && len(key) == 0:
		return fmt.Errorf("user %q has a client-certificate but no client-key", name)
	case len(key) > 0 && len(cert) == 0:
		return fmt.Errorf("user %q has a client-key but no client-certificate", name)
	case len(cert) > 0:
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return fmt.Errorf("user %q: client certificate and key: %w", name, err)
		}
		c.TLS.Certificates = []tls.Certificate{pair}
	}
	c.BearerToken = u.Token
	if u.TokenFile != "" {
		// As client-go: the file's (trimmed) contents win over token.
		tok, err := os.ReadFile(resolve(dir, u.TokenFile))
		if err != nil {
			return fmt.Errorf("user %q: tokenFile: %w", name, err)
		}
		if c.BearerToken = strings.TrimSpace(string(tok)); c.BearerToken == "" {
			return fmt.Errorf("user %q: tokenFile %s is empty", name, u.TokenFile)
		}
	}
	return nil
}

// material returns PEM data given inline or by file name, not both.
func material(user, key, file string, data []byte, dir string) ([]byte, error) {
	switch {
	case file != "" && len(data) > 0:
		return nil, fmt.Errorf("user %q sets both %s and %s-data", user, key, key)
	case file != "":
		b, err := os.ReadFile(resolve(dir, file))
		if err != nil {
			return nil, fmt.Errorf("user %q: %s: %w", user, key, err)
		}
		return b, nil
	}
	return data, nil
}

func resolve(dir, name string) string {
	if filepath.IsAbs(name) || dir == "" {
		return name
	}
	return filepath.Join(dir, name)
}

// Client returns an HTTP/1.1 client for the server that presents the
// client certificate and the bearer token, and gives up after timeout.
// Proxies come from the environment, as with client-go.
func (c *Config) Client(timeout time.Duration) *http.Client {
	var rt http.RoundTripper = &http.Transport{
		Proxy:               http.ProxyFromEnvironment,
		TLSClientConfig:     c.TLS,
		TLSHandshakeTimeout: timeout,
		DisableCompression:  true,
	}
	if c.BearerToken != "" {
		rt = bearer{token: c.BearerToken, next: rt}
	}
	return &http.Client{Transport: rt, Timeout: timeout}
}

// URL is the server's URL with path appended to its own path; path is
// absolute ("/api/v1/...") and already escaped.
func (c *Config) URL(path string) string {
	return strings.TrimSuffix(c.Server.String(), "/") + path
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(req)
}
