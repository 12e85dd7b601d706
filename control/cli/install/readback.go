package install

import (
	"fmt"
	"path"
	"strings"
)

// Installed holds the objects of a running install that its settings can
// be read back from (ReadConfig), as generic maps.
type Installed struct {
	// Destination and Injector are the Deployments plexus-destination
	// and plexus-injector.
	Destination, Injector map[string]any
	// NodeAgent is the DaemonSet plexus-node, nil in node-image mode.
	NodeAgent map[string]any
	// HA: the control plane has its PodDisruptionBudgets.
	HA bool
}

// ReadConfig reads back the settings install rendered into in's objects,
// the flags of arg() and hostDirs(), so that an upgrade keeps them. A flag
// an older version did not render keeps its default.
func ReadConfig(in Installed) (Config, error) {
	cfg := DefaultConfig()
	dest, err := containerArgs(in.Destination)
	if err != nil {
		return Config{}, fmt.Errorf("Deployment plexus-destination: %w", err)
	}
	for flag, into := range map[string]*string{
		"--trust-domain":           &cfg.TrustDomain,
		"--cluster-domain":         &cfg.ClusterDomain,
		"--default-inbound-policy": &cfg.DefaultInboundPolicy,
		"--cluster-networks":       &cfg.ClusterNetworks,
	} {
		if v, ok := dest[flag]; ok {
			*into = v
		}
	}
	inj, err := containerArgs(in.Injector)
	if err != nil {
		return Config{}, fmt.Errorf("Deployment plexus-injector: %w", err)
	}
	img, ok := inj["--proxy-image"]
	repo, tag, tagged := img, "", false
	if i := strings.LastIndex(img, ":"); i > strings.LastIndex(img, "/") {
		repo, tag, tagged = img[:i], img[i+1:], true
	}
	if !ok || !tagged || path.Base(repo) != "plexus-proxy" || path.Dir(repo) == "." {
		return Config{}, fmt.Errorf("Deployment plexus-injector: --proxy-image %q is not REGISTRY/plexus-proxy:TAG", img)
	}
	cfg.ImageRegistry, cfg.Version = path.Dir(repo), tag
	if in.NodeAgent == nil {
		cfg.NodeImageMode = true
	} else {
		node, err := containerArgs(in.NodeAgent)
		if err != nil {
			return Config{}, fmt.Errorf("DaemonSet plexus-node: %w", err)
		}
		for flag, into := range map[string]*string{"--cni-bin-dir": &cfg.CNIBinDir, "--cni-conf-dir": &cfg.CNIConfDir} {
			if v, ok := node[flag]; ok {
				*into = v
			}
		}
	}
	cfg.HA = in.HA
	if err := cfg.Validate(); err != nil {
		return Config{}, fmt.Errorf("the installed settings: %w", err)
	}
	return cfg, nil
}

// containerArgs returns the --name=value args of a workload's first
// container.
func containerArgs(o map[string]any) (map[string]string, error) {
	if o == nil {
		return nil, fmt.Errorf("not found")
	}
	podSpec, err := mapAt(o, "spec", "template", "spec")
	if err != nil {
		return nil, err
	}
	cs, _ := podSpec["containers"].([]any)
	if len(cs) == 0 {
		return nil, fmt.Errorf("no containers")
	}
	c, _ := cs[0].(object)
	args := map[string]string{}
	list, _ := c["args"].([]any)
	for _, a := range list {
		if name, val, ok := strings.Cut(str(a), "="); ok {
			args[name] = val
		}
	}
	return args, nil
}
