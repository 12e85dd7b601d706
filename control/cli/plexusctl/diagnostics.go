package plexusctl

// plexusctl diagnostics: a proxy's raw metrics, the endpoints destination
// gives a proxy, and the inbound policy of a pod's ports.

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/plexus-mesh/plexus/control/cli/authzreport"
	"github.com/plexus-mesh/plexus/control/cli/command"
	"github.com/plexus-mesh/plexus/control/cli/diagnostics"
	"github.com/plexus-mesh/plexus/control/cli/install"
	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/control/healthcheck"
	"github.com/plexus-mesh/plexus/control/inboundpolicy"
)

// diagnosticsCmd is plexusctl diagnostics and its subcommands.
func diagnosticsCmd(g *command.Globals, env Env) *cobra.Command {
	cmd := &cobra.Command{Use: "diagnostics", Short: "proxy-metrics po/NAME, endpoints SVC.NS:PORT, policy po/NAME", RunE: command.ParentRun}
	cmd.AddCommand(diagProxyMetricsCmd(g, env), diagEndpointsCmd(g, env), diagPolicyCmd(g, env))
	return cmd
}

func diagProxyMetricsCmd(g *command.Globals, env Env) *cobra.Command {
	return command.Leaf("proxy-metrics (po|deploy)/NAME", "a proxy's raw Prometheus metrics through a port-forward (under any inbound policy): proxy-metrics po/NAME (or deploy/NAME: every pod, each headed # POD NS/NAME)", func(fs *pflag.FlagSet) command.RunFunc {
		timeout := fs.Duration("timeout", 30*time.Second, "give up on the API server after this long")
		return func(ctx context.Context, pos []string) error {
			kind, name, err := diagnostics.ParseTarget(pos)
			if err != nil {
				return command.Usagef("%v: want diagnostics proxy-metrics (po|deploy)/NAME or KIND NAME", err)
			}
			client, dialer, ns, err := command.ConnectPods(g)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, *timeout)
			defer cancel()
			m := diagnostics.ProxyMetrics{Stat: stat.Stat{Client: client, Scrape: diagnostics.PortForwardScraper(dialer)}}
			return m.Run(ctx, env.Stdout, kind, ns, name)
		}
	})
}

func diagEndpointsCmd(g *command.Globals, env Env) *cobra.Command {
	return command.Leaf("endpoints SVC.NS:PORT", "what destination tells a proxy for SVC.NS:PORT, asked of a ready destination pod as a proxy asks (its first answer to Get), through a port-forward [--compare] [-o wide|json|yaml]", func(fs *pflag.FlagSet) command.RunFunc {
		trustDomain := fs.String("trust-domain", "", "trust domain of destination's identity (default: destination's, read from its Deployment like authz; "+install.DefaultConfig().TrustDomain+" without one)")
		clusterDomain := fs.String("cluster-domain", install.DefaultClusterDomain, "the cluster's DNS domain")
		compare := fs.Bool("compare", false, "also compute the endpoints from the EndpointSlices by destination's rules, and name the addresses where they differ")
		timeout := fs.Duration("timeout", 30*time.Second, "give up on the API server and destination after this long")
		return func(ctx context.Context, pos []string) error {
			if len(pos) != 1 {
				return command.Usagef("want diagnostics endpoints SVC.NS:PORT (or SVC.NS.svc.%s:PORT)", *clusterDomain)
			}
			a, err := diagnostics.ParseAuthority(pos[0], *clusterDomain)
			if err != nil {
				return command.Usagef("%v (e.g. web.shop:80)", err)
			}
			if err := command.TableOutput(g); err != nil {
				return err
			}
			client, dialer, _, err := command.ConnectPods(g)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, *timeout)
			defer cancel()
			td := *trustDomain
			if td == "" {
				s, err := inboundpolicy.Clients{Kube: client}.Settings(ctx, healthcheck.Namespace)
				if err != nil {
					return err
				}
				td = s.TrustDomain.Value
			}
			e := diagnostics.Endpoints{Client: client, Dial: dialer.DialConn, ControlNamespace: healthcheck.Namespace,
				TrustDomain: cmp.Or(td, install.DefaultConfig().TrustDomain), ClusterDomain: *clusterDomain, Compare: *compare}
			report, err := e.Run(ctx, a)
			if err != nil {
				return err
			}
			return diagnostics.RenderEndpoints(env.Stdout, report, g.Output)
		}
	})
}

// runDiagPolicy is plexusctl authz for one pod, without --from.
func diagPolicyCmd(g *command.Globals, env Env) *cobra.Command {
	return command.Leaf("policy po/NAME", "inbound policy of each port of a pod: policy po/NAME [--port P] (plexusctl authz without --from)", func(fs *pflag.FlagSet) command.RunFunc {
		port := fs.Uint("port", 0, "show only this port, declared by the pod or not (default: every TCP port its containers declare)")
		timeout := fs.Duration("timeout", 30*time.Second, "give up on the API server after this long")
		return func(ctx context.Context, pos []string) error {
			kind, name, err := diagnostics.ParseTarget(pos)
			if err == nil && kind != diagnostics.Pod {
				err = fmt.Errorf("unknown kind %q: want po|pod (plexusctl authz takes workloads)", kind)
			}
			if err != nil {
				return command.Usagef("%v: want diagnostics policy po/NAME or pod NAME", err)
			}
			if err := command.TableOutput(g); err != nil {
				return err
			}
			if *port > 65535 {
				return command.Usagef("--port %d: want 1-65535", *port)
			}
			cfg := authzreport.Config{Kind: authzreport.Pod, Name: name, Port: uint16(*port), ControlPlaneNamespace: healthcheck.Namespace}
			return runAuthz(ctx, g, env, cfg, *timeout)
		}
	})
}
