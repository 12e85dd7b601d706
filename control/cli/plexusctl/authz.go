package plexusctl

// The authz command and diagnostics policy: inbound policy as a client
// meets it.

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	gateway "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/plexus-mesh/plexus/control/cli/authzreport"
	"github.com/plexus-mesh/plexus/control/cli/command"
	"github.com/plexus-mesh/plexus/control/healthcheck"
	"github.com/plexus-mesh/plexus/control/inboundpolicy"
)

// connectPolicy is connect with the clients inbound policies are read
// with.
func connectPolicy(g *command.Globals) (inboundpolicy.Clients, *rest.Config, string, error) {
	client, restCfg, ns, err := command.Connect(g)
	if err != nil {
		return inboundpolicy.Clients{}, nil, "", err
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return inboundpolicy.Clients{}, nil, "", fmt.Errorf("kubernetes client: %w", err)
	}
	gw, err := gateway.NewForConfig(restCfg)
	if err != nil {
		return inboundpolicy.Clients{}, nil, "", fmt.Errorf("Gateway API client: %w", err)
	}
	return inboundpolicy.Clients{Kube: client, Dynamic: dyn, Gateway: gw}, restCfg, ns, nil
}

func authzCmd(g *command.Globals, env Env) *cobra.Command {
	return command.Leaf("authz (deploy|sts|ds|pod)/NAME", "inbound policy of each port of a workload: authz deploy/NAME [--from sa/NAME [--from-ip ADDR]] [-o json]", func(fs *pflag.FlagSet) command.RunFunc {
		from := fs.String("from", "", "evaluate this client on every port: sa/NAME (service account in --from-namespace), a spiffe:// ID, or unauthenticated")
		fromNS := fs.String("from-namespace", "", "namespace of --from sa/NAME (default: the workload's)")
		fromIP := fs.String("from-ip", "", "the client's address (default: unknown; each authorization's networks are shown as a condition)")
		port := fs.Uint("port", 0, "show only this port, declared by the pod or not (default: every TCP port its containers declare)")
		timeout := fs.Duration("timeout", 30*time.Second, "give up on the API server after this long")
		return func(ctx context.Context, pos []string) error {
			kind, name, err := authzreport.ParseTarget(pos)
			if err != nil {
				return command.Usagef("%v: want authz (deploy|sts|ds|pod)/NAME or KIND NAME", err)
			}
			if err := command.TableOutput(g); err != nil {
				return err
			}
			if *port > 65535 {
				return command.Usagef("--port %d: want 1-65535", *port)
			}
			cfg := authzreport.Config{Kind: kind, Name: name, Port: uint16(*port), ControlPlaneNamespace: healthcheck.Namespace}
			if *from != "" {
				if cfg.From, err = authzreport.ParseFrom(*from, cmp.Or(*fromNS, command.Namespace(g))); err != nil {
					return command.UsageError{Err: err}
				}
			} else if *fromNS != "" {
				return command.Usagef("--from-namespace needs --from")
			}
			if *fromIP != "" {
				if *from == "" {
					return command.Usagef("--from-ip needs --from")
				}
				if cfg.FromAddr, err = netip.ParseAddr(*fromIP); err != nil {
					return command.Usagef("--from-ip: %v", err)
				}
				cfg.FromAddr = cfg.FromAddr.Unmap()
			}
			return runAuthz(ctx, g, env, cfg, *timeout)
		}
	})
}

// runAuthz evaluates cfg, in the namespace of g's context, and prints the
// report (authz and diagnostics policy).
func runAuthz(ctx context.Context, g *command.Globals, env Env, cfg authzreport.Config, timeout time.Duration) error {
	clients, _, ns, err := connectPolicy(g)
	if err != nil {
		return err
	}
	cfg.Namespace = ns
	if err := cfg.Validate(); err != nil {
		return command.UsageError{Err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	report, err := authzreport.Authz{Clients: clients}.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return authzreport.Render(env.Stdout, report, g.Output)
}
