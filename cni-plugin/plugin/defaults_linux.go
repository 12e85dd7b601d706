package plugin

import (
	"io"
	"log/slog"
	"time"

	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/cni-plugin/xtables"
)

// LockWait bounds the wait for the xtables lock.
const LockWait = 5 * time.Second

// New returns a Plugin wired to the Kubernetes API named by the kubeconfig,
// iptables in the pod's network namespace, and the configured log file.
func New(stdout io.Writer) *Plugin {
	return &Plugin{
		Stdout: stdout,
		Retry:  DefaultRetry(),
		NewLog: FileLogger,
		Pods: func(conf *NetConf) (PodGetter, error) {
			return NewKubeconfigPodGetter(conf.Kubeconfig, DefaultRetry().PerAttempt)
		},
		Tables: func(conf *NetConf, log *slog.Logger) Tables {
			return NewNetnsTables(conf.Mode(), LockWait, log)
		},
	}
}

// probeBinaries finds the IPv4 binaries and checks their version.
func probeBinaries(conf *NetConf) error {
	r, err := xtables.New(xtables.Config{Family: rules.IPv4, Mode: conf.Mode(), LockWait: LockWait})
	if err != nil {
		return err
	}
	return r.CheckVersion()
}
