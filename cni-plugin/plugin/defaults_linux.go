package plugin

import (
	"io"
	"log/slog"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/netnsrules"
	"github.com/plexus-mesh/plexus/cni-plugin/podrules"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/cni-plugin/xtables"
)

// New returns a Plugin wired to the Kubernetes API named by the kubeconfig,
// iptables in the pod's network namespace, and the configured log file.
func New(stdout io.Writer) *Plugin {
	return &Plugin{
		Stdout: stdout,
		Retry:  podrules.DefaultRetry(),
		NewLog: FileLogger,
		Pods: func(conf *netconf.NetConf) (podrules.PodGetter, error) {
			return podrules.NewKubeconfigPodGetter(conf.Kubeconfig, podrules.DefaultRetry().PerAttempt)
		},
		Tables: func(conf *netconf.NetConf, log *slog.Logger) Tables {
			return netnsrules.NewNetnsTables(conf.Mode(), netnsrules.LockWait, log)
		},
	}
}

// probeBinaries finds the IPv4 binaries and checks their version.
func probeBinaries(conf *netconf.NetConf) error {
	r, err := xtables.New(xtables.Config{Family: rules.IPv4, Mode: conf.Mode(), LockWait: netnsrules.LockWait})
	if err != nil {
		return err
	}
	return r.CheckVersion()
}
