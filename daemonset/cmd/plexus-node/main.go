// Command plexus-node is the Plexus node agent: `run` in the DaemonSet,
// `install --root` to bake the CNI plugin into a node image, `uninstall`
// to remove it, and `wait` for the cleanup DaemonSet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/daemonset/agent"
	"github.com/plexus-mesh/plexus/daemonset/nodeevents"
	"github.com/plexus-mesh/plexus/daemonset/nodetaint"
	"github.com/plexus-mesh/plexus/daemonset/repair"
)

const usage = `usage: plexus-node <command> [flags]

commands:
  run        install the CNI plugin and keep it last in the primary CNI config (DaemonSet)
  install    lay the plugin down into a node image root (no API calls)
  uninstall  remove the conflist entry, then the credentials, then the binary
  wait       do nothing until SIGTERM (the cleanup DaemonSet's container, ready once
             its init container has run uninstall)

Run "plexus-node <command> -h" for a command's flags.
`

const saDir = "/var/run/secrets/kubernetes.io/serviceaccount"

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := run(os.Args[1:], os.Stderr, log); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			log.Error("plexus-node failed", "err", err)
		}
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer, log *slog.Logger) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command")
	}
	switch args[0] {
	case "run":
		cfg, nodeName, owner, err := parseRun(args[1:], stderr)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", cfg.Listen)
		if err != nil {
			return fmt.Errorf("listening for /ready and /metrics: %w", err)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		deps := agent.Deps{Registry: reg, Log: log, Listener: ln}
		if deps.Pods, err = apiClient(nodeName, log); err != nil {
			return err
		}
		if deps.Pods != nil {
			deps.Taint = &nodetaint.Remover{Client: deps.Pods, Node: nodeName}
			deps.Events = &nodeevents.Recorder{Client: deps.Pods, Node: nodeName}
			cfg.Repair.Node = nodeName
			if owner.Namespace != "" {
				owner.Client = deps.Pods
				deps.Owner = &owner
			}
		}
		return agent.Run(ctx, cfg, deps)
	case "install":
		cfg, err := parseImage(args[1:], stderr)
		if err != nil {
			return err
		}
		res, err := agent.InstallImage(cfg)
		if err != nil {
			return err
		}
		if res.NoConfig {
			log.Warn("no primary CNI config in the image; only the binary is installed", "conf_dir", cfg.At(cfg.CNIConfDir))
			return nil
		}
		log.Info("installed plexus-cni into the image", "conflist", res.Conflist.Path, "changed", res.Conflist.Changed)
		return nil
	case "uninstall":
		paths, err := parseUninstall(args[1:], stderr)
		if err != nil {
			return err
		}
		if err := agent.Uninstall(paths); err != nil {
			return err
		}
		log.Info("removed plexus-cni from this node", "conf_dir", paths.CNIConfDir, "bin_dir", paths.CNIBinDir, "state_dir", paths.StateDir)
		return nil
	case "wait":
		if err := parse(flag.NewFlagSet("wait", flag.ContinueOnError), args[1:]); err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		<-ctx.Done()
		return nil
	case "-h", "--help", "help":
		fmt.Fprint(stderr, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q", args[0])
}

func pathFlags(fs *flag.FlagSet, p *agent.Paths, root string) {
	fs.StringVar(&p.Root, "root", root, "where the host's / is (\"/host\" in the DaemonSet, an image root in node-image mode)")
	fs.StringVar(&p.CNIBinDir, "cni-bin-dir", agent.DefaultCNIBinDir, "CNI bin dir on the host")
	fs.StringVar(&p.CNIConfDir, "cni-conf-dir", agent.DefaultCNIConfDir, "CNI conf dir on the host")
	fs.StringVar(&p.StateDir, "state-dir", agent.DefaultStateDir, "root-only dir on the host for credentials and the conflist record")
}

func parseRun(args []string, stderr io.Writer) (agent.RunConfig, string, agent.Owner, error) {
	var c agent.RunConfig
	var nodeName string
	var owner agent.Owner
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pathFlags(fs, &c.Paths, "/host")
	fs.StringVar(&c.PluginBinary, "plugin-binary", "/opt/plexus/bin/plexus-cni", "plugin binary to install")
	fs.StringVar(&c.PluginConfig, "plugin-config", "", "JSON file with the plugin's conflist keys (the ConfigMap)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "host path of a kubeconfig for the plugin (e.g. the kubelet's); empty: write one for the agent's service account")
	fs.StringVar(&c.APIServer, "api-server", inClusterServer(), "API server URL for the plugin, reachable from the host network")
	fs.StringVar(&c.CAFile, "ca-file", filepath.Join(saDir, "ca.crt"), "API server CA bundle")
	fs.StringVar(&c.TokenSource, "token-file", filepath.Join(saDir, "token"), "service account token, kept fresh by the kubelet")
	fs.DurationVar(&c.TokenSync, "token-sync", 0, "how often to copy a rotated token (default 1m)")
	fs.StringVar(&c.Listen, "listen", ":9190", "address of /ready and /metrics")
	fs.StringVar(&nodeName, "node-name", os.Getenv("NODE_NAME"), "this node, whose "+nodetaint.Key+" taint is removed when ready and whose meshed pods are repaired; empty: neither")
	fs.StringVar((*string)(&c.Repair.Mode), "repair", string(repair.Apply), "what to do with a meshed pod whose network namespace lacks the redirect rules: apply them, delete the pod, or off (only report)")
	fs.DurationVar(&c.Repair.Resync, "repair-resync", time.Minute, "how often every meshed pod's rules are checked again")
	fs.StringVar(&c.NetnsDir, "netns-dir", agent.DefaultNetnsDir, "host dir where the container runtime bind-mounts pods' network namespaces (reached under --root)")
	fs.StringVar(&owner.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the agent's DaemonSet; with --node-name, the plugin is uninstalled when the agent stops because its DaemonSet is being deleted; empty: never")
	fs.StringVar(&owner.Name, "daemonset", "plexus-node", "name of the agent's DaemonSet")
	if err := parse(fs, args); err != nil {
		return c, "", owner, err
	}
	return c, nodeName, owner, c.Validate()
}

func parseImage(args []string, stderr io.Writer) (agent.ImageConfig, error) {
	var c agent.ImageConfig
	fs := flag.NewFlagSet("install", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pathFlags(fs, &c.Paths, "")
	fs.StringVar(&c.PluginBinary, "plugin-binary", besideSelf("plexus-cni"), "plugin binary to install")
	fs.StringVar(&c.PluginConfig, "plugin-config", "", "JSON file with the plugin's conflist keys")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "/var/lib/kubelet/kubeconfig", "host path of the kubeconfig the plugin uses")
	fs.BoolVar(&c.AllowNoConfig, "allow-no-config", false, "install the binary even if the image has no primary CNI config")
	if err := parse(fs, args); err != nil {
		return c, err
	}
	if c.Root == "" {
		return c, errors.New("install: --root is required (the image root; use --root / to install on this host)")
	}
	return c, c.Validate()
}

func parseUninstall(args []string, stderr io.Writer) (agent.Paths, error) {
	var p agent.Paths
	fs := flag.NewFlagSet("uninstall", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pathFlags(fs, &p, "/")
	if err := parse(fs, args); err != nil {
		return p, err
	}
	return p, p.Validate()
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())
	}
	return nil
}

// apiClient uses the agent's in-cluster service account to remove the
// node's taint, record Events and repair the node's meshed pods; nil
// without a node name.
func apiClient(node string, log *slog.Logger) (kubernetes.Interface, error) {
	if node == "" {
		log.Info("no node name; not removing the " + nodetaint.Key + " taint, recording Events nor repairing pods")
		return nil, nil
	}
	rc, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("API client for the node: %w", err)
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("API client for the node: %w", err)
	}
	return client, nil
}

func inClusterServer() string {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return ""
	}
	return "https://" + net.JoinHostPort(host, port)
}

func besideSelf(name string) string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	return filepath.Join(filepath.Dir(exe), name)
}
