package plugininstall

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/plexus-mesh/plexus/daemonset/atomicfile"
)

// File names in the credentials dir.
const (
	KubeconfigFile = "plexus-cni.kubeconfig"
	TokenFile      = "plexus-cni.token"
)

// Credentials are the plugin's API credentials on the host. The kubeconfig
// names the token by path (tokenFile), so it is written once and only the
// token file changes when the projected service account token rotates.
type Credentials struct {
	Dir string // where to write: root-only (0700), outside the CNI conf dir
	// HostDir is Dir as the plugin sees it on the host, when the agent
	// writes through a mount (Dir /host/var/lib/plexus, HostDir
	// /var/lib/plexus). Empty means Dir.
	HostDir string
	Server  string // API server URL reachable from the host network
	CAFile  string // the API server's CA bundle (embedded in the kubeconfig)
	// TokenSource is the projected service account token the kubelet keeps
	// fresh inside the agent's container.
	TokenSource string
}

// Validate checks the fields are set.
func (c *Credentials) Validate() error {
	switch {
	case c.Dir == "":
		return errors.New("credentials dir is empty")
	case c.Server == "":
		return errors.New("API server URL is empty")
	case c.CAFile == "":
		return errors.New("CA file is empty")
	case c.TokenSource == "":
		return errors.New("token source is empty")
	}
	return nil
}

// KubeconfigPath is where the kubeconfig is written.
func (c *Credentials) KubeconfigPath() string { return filepath.Join(c.Dir, KubeconfigFile) }

// TokenPath is where the token is written.
func (c *Credentials) TokenPath() string { return filepath.Join(c.Dir, TokenFile) }

// HostKubeconfigPath is the kubeconfig's path for the plugin on the host,
// the value of "kubeconfig" in its conflist entry.
func (c *Credentials) HostKubeconfigPath() string { return filepath.Join(c.hostDir(), KubeconfigFile) }

func (c *Credentials) hostDir() string {
	if c.HostDir != "" {
		return c.HostDir
	}
	return c.Dir
}

// Install writes the token and then the kubeconfig, both 0600, into a
// 0700 dir. It reports whether anything was written.
func (c *Credentials) Install() (bool, error) {
	if err := c.Validate(); err != nil {
		return false, err
	}
	if err := os.MkdirAll(c.Dir, 0o700); err != nil {
		return false, fmt.Errorf("creating credentials dir: %w", err)
	}
	if err := os.Chmod(c.Dir, 0o700); err != nil {
		return false, fmt.Errorf("credentials dir: %w", err)
	}
	if err := writableDir(c.Dir); err != nil {
		return false, fmt.Errorf("credentials dir: %w", err)
	}
	tok, err := c.SyncToken()
	if err != nil {
		return false, err
	}
	ca, err := os.ReadFile(c.CAFile)
	if err != nil {
		return false, fmt.Errorf("reading API server CA: %w", err)
	}
	kc, err := Kubeconfig(c.Server, ca, filepath.Join(c.hostDir(), TokenFile))
	if err != nil {
		return false, err
	}
	wrote, err := writeIfChanged(c.KubeconfigPath(), kc)
	return tok || wrote, err
}

// SyncToken copies the token source to the token file when it differs,
// and reports whether it did. Call it periodically: the kubelet rotates the
// projected token well before it expires.
func (c *Credentials) SyncToken() (bool, error) {
	tok, err := os.ReadFile(c.TokenSource)
	if err != nil {
		return false, fmt.Errorf("reading service account token: %w", err)
	}
	if len(bytes.TrimSpace(tok)) == 0 {
		return false, fmt.Errorf("service account token %s is empty", c.TokenSource)
	}
	return writeIfChanged(c.TokenPath(), tok)
}

// Remove deletes the kubeconfig, the token and the dir if it is then empty.
func (c *Credentials) Remove() error {
	if err := removeFile(c.KubeconfigPath()); err != nil {
		return err
	}
	if err := removeFile(c.TokenPath()); err != nil {
		return err
	}
	// Fails, harmlessly, when the dir still holds the agent's state.
	_ = os.Remove(c.Dir)
	return nil
}

// Kubeconfig renders a kubeconfig for the plugin that reads its bearer
// token from tokenPath on every use.
func Kubeconfig(server string, ca []byte, tokenPath string) ([]byte, error) {
	cfg := clientcmdapi.Config{
		Clusters: map[string]*clientcmdapi.Cluster{
			"local": {Server: server, CertificateAuthorityData: ca},
		},
		AuthInfos: map[string]*clientcmdapi.AuthInfo{
			"plexus-cni": {TokenFile: tokenPath},
		},
		Contexts: map[string]*clientcmdapi.Context{
			"plexus-cni": {Cluster: "local", AuthInfo: "plexus-cni"},
		},
		CurrentContext: "plexus-cni",
	}
	b, err := clientcmd.Write(cfg)
	if err != nil {
		return nil, fmt.Errorf("encoding plugin kubeconfig: %w", err)
	}
	return b, nil
}

func writeIfChanged(path string, data []byte) (bool, error) {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() == 0o600 {
			return false, nil
		}
	}
	if err := atomicfile.Write(path, data, 0o600); err != nil {
		return false, err
	}
	return true, nil
}
