// Package mccmd is the multicluster extension's command line, plexusctl
// multicluster: install, uninstall, link, unlink and check, built from
// control/cli/command like the core's; plexusctl adds Command to its tree.
package mccmd

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/plexus-mesh/plexus/control/cli/command"
	"github.com/plexus-mesh/plexus/control/cli/extension"
	"github.com/plexus-mesh/plexus/control/cli/install"
	"github.com/plexus-mesh/plexus/control/cli/upgrade"
	"github.com/plexus-mesh/plexus/control/healthcheck"
	"github.com/plexus-mesh/plexus/control/kubeclient"
	"github.com/plexus-mesh/plexus/deploy"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	mccli "github.com/plexus-mesh/plexus/multicluster/cli"
)

// manifests is the extension's folder of deploy.Manifests.
var manifests = extension.Manifests{FS: deploy.Manifests, Dir: "plexus-multicluster", Namespace: mc.Namespace}

// Command is plexusctl multicluster and its subcommands: g are
// plexusctl's global flags, env its process streams.
func Command(g *command.Globals, env command.Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "multicluster",
		Short: "the multicluster extension: install, link, unlink, check, gateways",
		Long: "The multicluster extension (namespace " + mc.Namespace + "): Links to other clusters, whose exported\n" +
			"Services are mirrored here and reached pod to pod (flat mode).",
		RunE: command.ParentRun,
	}
	cmd.AddCommand(installCmd(env), uninstallCmd(g, env), allowCmd(env), linkCmd(g, env), unlinkCmd(g, env), checkCmd(g, env), gatewaysCmd(g, env))
	return cmd
}

func installCmd(env command.Env) *cobra.Command {
	return command.Leaf("install", "print the extension's manifests for kubectl apply -f - (in every cluster of a link)", func(*pflag.FlagSet) command.RunFunc {
		return func(_ context.Context, args []string) error {
			if err := command.NoArgs(args, func() error { return nil }); err != nil {
				return err
			}
			return manifests.Install(env.Stdout)
		}
	})
}

func uninstallCmd(g *command.Globals, env command.Env) *cobra.Command {
	return command.Leaf("uninstall", "print the extension's objects for kubectl delete -f -; refuses while Links exist (their finalizer needs the service mirror)", func(*pflag.FlagSet) command.RunFunc {
		return func(ctx context.Context, args []string) error {
			if err := command.NoArgs(args, func() error { return nil }); err != nil {
				return err
			}
			_, dyn, err := connect(g)
			if err != nil {
				return err
			}
			list, err := dyn.Resource(mc.LinkResource).Namespace(mc.Namespace).List(ctx, metav1.ListOptions{})
			if err == nil && len(list.Items) > 0 {
				var names []string
				for _, l := range list.Items {
					names = append(names, l.GetName())
				}
				return fmt.Errorf("Links %v exist: unlink them first (plexusctl multicluster unlink --cluster-name NAME), or their mirrors and finalizers stay behind", names)
			}
			return manifests.Uninstall(env.Stdout)
		}
	})
}

func allowCmd(env command.Env) *cobra.Command {
	return command.Leaf("allow", "run against the cluster to link to: print a service account of its own for one linking cluster (link --service-account-name), for kubectl apply -f -", func(fs *pflag.FlagSet) command.RunFunc {
		account := fs.String("service-account-name", "", "the account's name, in "+mc.Namespace)
		return func(_ context.Context, args []string) error {
			if err := command.NoArgs(args, func() error { return nil }); err != nil {
				return err
			}
			if *account == "" {
				return command.Usagef("--service-account-name is required")
			}
			var out bytes.Buffer
			if err := mccli.Allow(*account, &out); err != nil {
				return command.UsageError{Err: err}
			}
			_, err := env.Stdout.Write(out.Bytes())
			return err
		}
	})
}

func linkCmd(g *command.Globals, env command.Env) *cobra.Command {
	return command.Leaf("link", "run against the cluster to link to: print the credentials Secret and Link to apply in the linking cluster", func(fs *pflag.FlagSet) command.RunFunc {
		var o mccli.LinkOptions
		fs.StringVar(&o.ClusterName, "cluster-name", "", "the name the linking cluster gives this one (mirrors are <service>-<name>)")
		fs.StringVar(&o.APIServer, "api-server-address", "", "this cluster's API server as the linking cluster's pods reach it (default: the kubeconfig's)")
		fs.DurationVar(&o.TokenLifetime, "token-lifetime", mccli.DefaultTokenLifetime, "lifetime of the token minted for the link")
		fs.StringVar(&o.ServiceAccount, "service-account-name", "", "the account to mint the link's token for, made by plexusctl multicluster allow (default: "+mccli.RemoteAccessAccount+", shared by every link)")
		fs.StringVar(&o.GatewayAddress, "gateway-address", "", "this cluster's gateway (ip:port) as the linking cluster's pods reach it (default: its Service's load-balancer address, else a node's address and the node port)")
		return func(ctx context.Context, args []string) error {
			if err := command.NoArgs(args, o.Validate); err != nil {
				return err
			}
			kube, cfg, _, err := command.Connect(g)
			if err != nil {
				return err
			}
			dyn, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			u := upgrade.Upgrader{Client: kube, Dynamic: dyn}
			l := mccli.Linker{Remote: kube, Config: cfg, Installed: func(ctx context.Context) (install.Config, error) { return u.Installed(ctx) }}
			return l.Link(ctx, o, env.Stdout)
		}
	})
}

func unlinkCmd(g *command.Globals, env command.Env) *cobra.Command {
	return command.Leaf("unlink", "run against the linking cluster: delete the Link (its mirrors go with it), its credentials, and, given --remote-kubeconfig, revoke its token", func(fs *pflag.FlagSet) command.RunFunc {
		cluster := fs.String("cluster-name", "", "the linked cluster's name")
		remoteKubeconfig := fs.String("remote-kubeconfig", "", "kubeconfig of the linked cluster, to delete the Secret its token is bound to (revoking it)")
		timeout := fs.Duration("timeout", 30*time.Second, "how long the Link may take to go")
		return func(ctx context.Context, args []string) error {
			if err := command.NoArgs(args, func() error { return mccli.LinkOptions{ClusterName: *cluster, TokenLifetime: time.Hour}.Validate() }); err != nil {
				return err
			}
			kube, dyn, err := connect(g)
			if err != nil {
				return err
			}
			u := mccli.Unlinker{Local: kube, Dynamic: dyn, Wait: *timeout}
			if *remoteKubeconfig != "" {
				cfg, err := clientcmd.BuildConfigFromFlags("", *remoteKubeconfig)
				if err != nil {
					return fmt.Errorf("--remote-kubeconfig: %w", err)
				}
				if u.Remote, err = kubernetes.NewForConfig(cfg); err != nil {
					return err
				}
			}
			return u.Unlink(ctx, *cluster, env.Stdout)
		}
	})
}

func checkCmd(g *command.Globals, env command.Env) *cobra.Command {
	return command.Leaf("check", "check the extension, each Link and its mirrors, and that both clusters of each Link trust a common anchor", func(fs *pflag.FlagSet) command.RunFunc {
		timeout := fs.Duration("timeout", 30*time.Second, "give up on the API servers after this long")
		return func(ctx context.Context, args []string) error {
			if err := command.NoArgs(args, func() error { return nil }); err != nil {
				return err
			}
			kube, dyn, err := connect(g)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, *timeout)
			defer cancel()
			c := mccli.Checker{Local: kube, Dynamic: dyn, NewRemote: func(kubeconfig []byte) (kubernetes.Interface, error) {
				return kubeclient.Remote(kubeconfig, "plexusctl")
			}}
			if !healthcheck.Print(env.Stdout, c.Run(ctx), env.Colour) {
				return command.ErrReported
			}
			return nil
		}
	})
}

func gatewaysCmd(g *command.Globals, env command.Env) *cobra.Command {
	return command.Leaf("gateways", "each linked cluster's gateway: its address, whether destination's health checks pass, its gateway-mode mirrors here, the last check's latency", func(fs *pflag.FlagSet) command.RunFunc {
		timeout := fs.Duration("timeout", 30*time.Second, "give up on the API server after this long")
		return func(ctx context.Context, args []string) error {
			if err := command.NoArgs(args, func() error { return nil }); err != nil {
				return err
			}
			if g.Output != "" && g.Output != "json" {
				return command.Usagef("unknown output format %q: want json", g.Output)
			}
			kube, _, err := connect(g)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, *timeout)
			defer cancel()
			gs, err := mccli.Gateways(ctx, kube, mccli.ProxyScrape(kube))
			if err != nil {
				return err
			}
			return mccli.PrintGateways(env.Stdout, gs, g.Output)
		}
	})
}

func connect(g *command.Globals) (kubernetes.Interface, dynamic.Interface, error) {
	kube, cfg, _, err := command.Connect(g)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	return kube, dyn, err
}
