package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/plexus-mesh/plexus/daemonset/conflist"
	"github.com/plexus-mesh/plexus/daemonset/pluginentry"
	"github.com/plexus-mesh/plexus/daemonset/plugininstall"
)

// ImageResult says what InstallImage did.
type ImageResult struct {
	Conflist conflist.Result
	NoConfig bool // no primary config in the image; only the binary is in place
}

// InstallImage lays the plugin binary down under the image root and adds
// the plugin, with the given kubeconfig, to the image's primary CNI config.
// It makes no API calls.
func InstallImage(cfg ImageConfig) (ImageResult, error) {
	if err := cfg.Validate(); err != nil {
		return ImageResult{}, err
	}
	entry, err := buildEntry(cfg.PluginConfig, cfg.Kubeconfig, pluginentry.Sockets{})
	if err != nil {
		return ImageResult{}, err
	}
	if _, err := plugininstall.Binary(cfg.PluginBinary, cfg.At(cfg.CNIBinDir)); err != nil {
		return ImageResult{}, err
	}
	p := patcher(cfg.Paths, entry)
	res, err := p.Patch()
	if errors.Is(err, conflist.ErrNoConfig) && cfg.AllowNoConfig {
		return ImageResult{NoConfig: true}, nil
	}
	if err != nil {
		return ImageResult{}, fmt.Errorf("patching the image's primary CNI config: %w", err)
	}
	return ImageResult{Conflist: res}, nil
}

// Uninstall removes, in this order, the plugin's entry from the primary
// config (restoring it byte for byte when nothing else touched it since),
// the sockets a killed agent may have left, the credentials and the
// binary, so the runtime never calls a missing plugin.
func Uninstall(paths Paths) error {
	if err := paths.Validate(); err != nil {
		return err
	}
	p := patcher(paths, nil)
	if _, err := p.Unpatch(); err != nil {
		return fmt.Errorf("removing plexus-cni from the CNI config: %w", err)
	}
	for _, sock := range []string{paths.ReportSocket(), paths.PodSocket()} {
		if err := os.Remove(paths.At(sock)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("removing the agent's socket: %w", err)
		}
	}
	creds := &plugininstall.Credentials{Dir: paths.At(paths.StateDir)}
	if err := creds.Remove(); err != nil {
		return err
	}
	if err := plugininstall.RemoveBinary(paths.At(paths.CNIBinDir)); err != nil {
		return err
	}
	return nil
}

func patcher(paths Paths, entry []byte) *conflist.Patcher {
	return &conflist.Patcher{ConfDir: paths.At(paths.CNIConfDir), StateDir: paths.At(paths.StateDir), Entry: entry}
}

func buildEntry(configFile, kubeconfig string, sockets pluginentry.Sockets) ([]byte, error) {
	var raw []byte
	if configFile != "" {
		var err error
		if raw, err = os.ReadFile(configFile); err != nil {
			return nil, fmt.Errorf("reading plugin config: %w", err)
		}
	}
	return pluginentry.Build(raw, kubeconfig, sockets)
}
