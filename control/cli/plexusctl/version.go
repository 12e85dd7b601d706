package plexusctl

// plexusctl version: this client's, the control plane's and the proxies'.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/control/cli/command"
	"github.com/plexus-mesh/plexus/control/healthcheck"
	"github.com/plexus-mesh/plexus/control/inject"
	"github.com/plexus-mesh/plexus/control/version"
)

// versions is what plexusctl version reports.
type versions struct {
	Client string `json:"client"`
	// ControlPlane is the image tag its Deployments run: one, or each
	// Deployment's when they differ (mid-upgrade).
	ControlPlane *controlPlaneVersion `json:"controlPlane,omitempty"`
	// Proxies are the versions of the proxies in the cluster, with how
	// many pods run each.
	Proxies []proxyVersion `json:"proxies,omitempty"`

	asked bool // the cluster was asked
}

type controlPlaneVersion struct {
	Version    string            `json:"version"`
	Components map[string]string `json:"components"`
}

type proxyVersion struct {
	Version string `json:"version"`
	Pods    int    `json:"pods"`
}

func versionCmd(g *command.Globals, env Env) *cobra.Command {
	return command.Leaf("version", "the versions of plexusctl, the control plane and the proxies in the cluster", func(fs *pflag.FlagSet) command.RunFunc {
		client := fs.Bool("client", false, "only plexusctl's version (no cluster)")
		short := fs.Bool("short", false, "the versions alone, one per line: plexusctl's, then the control plane's")
		timeout := fs.Duration("timeout", 30*time.Second, "give up on the API server after this long")
		return func(ctx context.Context, args []string) error {
			if err := command.NoArgs(args, func() error {
				switch g.Output {
				case "", "json", "yaml":
					return nil
				}
				return fmt.Errorf("unknown output format %q: want json or yaml", g.Output)
			}); err != nil {
				return err
			}
			v := versions{Client: version.Version}
			var clusterErr error
			if !*client {
				ctx, cancel := context.WithTimeout(ctx, *timeout)
				defer cancel()
				clusterErr = v.fromCluster(ctx, g)
			}
			if err := v.print(env.Stdout, g.Output, *short); err != nil {
				return err
			}
			return clusterErr
		}
	})
}

// fromCluster reads the control plane's and the proxies' versions.
func (v *versions) fromCluster(ctx context.Context, g *command.Globals) error {
	kube, _, _, err := command.Connect(g)
	if err != nil {
		return err
	}
	cp, err := controlPlaneVersions(ctx, kube)
	if err != nil {
		return err
	}
	pods, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: inject.LabelProxyVersion})
	if err != nil {
		return fmt.Errorf("listing meshed pods: %w", err)
	}
	v.ControlPlane, v.asked = cp, true // the cluster answered
	count := map[string]int{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			count[p.Labels[inject.LabelProxyVersion]]++
		}
	}
	for ver, n := range count {
		v.Proxies = append(v.Proxies, proxyVersion{Version: ver, Pods: n})
	}
	sort.Slice(v.Proxies, func(i, j int) bool { return v.Proxies[i].Version < v.Proxies[j].Version })
	return nil
}

// controlPlaneVersions is the image tag of each control-plane Deployment;
// nil when Plexus is not installed.
func controlPlaneVersions(ctx context.Context, kube kubernetes.Interface) (*controlPlaneVersion, error) {
	list, err := kube.AppsV1().Deployments(healthcheck.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=plexus"})
	if err != nil {
		return nil, fmt.Errorf("listing the control plane: %w", err)
	}
	if len(list.Items) == 0 {
		return nil, nil
	}
	cp := &controlPlaneVersion{Components: map[string]string{}}
	tags := map[string]bool{}
	for _, d := range list.Items {
		img, _, _ := strings.Cut(d.Spec.Template.Spec.Containers[0].Image, "@")
		tag := "unknown"
		if i := strings.LastIndex(img, ":"); i > strings.LastIndex(img, "/") {
			tag = img[i+1:]
		}
		cp.Components[d.Name] = tag
		tags[tag] = true
	}
	cp.Version = "mixed"
	if len(tags) == 1 {
		for t := range tags {
			cp.Version = t
		}
	}
	return cp, nil
}

func (v versions) print(w io.Writer, output string, short bool) error {
	switch output {
	case "json":
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(v)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	cp := "not installed"
	if v.ControlPlane != nil {
		cp = v.ControlPlane.Version
	}
	if short {
		fmt.Fprintln(w, v.Client)
		if v.ControlPlane != nil {
			fmt.Fprintln(w, cp)
		}
		return nil
	}
	fmt.Fprintf(w, "Client version: %s\n", v.Client)
	if !v.asked {
		return nil
	}
	fmt.Fprintf(w, "Control plane version: %s\n", cp)
	if v.ControlPlane != nil && v.ControlPlane.Version == "mixed" {
		var names []string
		for n := range v.ControlPlane.Components {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(w, "  %s: %s\n", n, v.ControlPlane.Components[n])
		}
	}
	var ps []string
	for _, p := range v.Proxies {
		ps = append(ps, fmt.Sprintf("%s (%d pods)", p.Version, p.Pods))
	}
	if len(ps) == 0 {
		ps = []string{"none"}
	}
	fmt.Fprintf(w, "Proxy versions: %s\n", strings.Join(ps, ", "))
	return nil
}
