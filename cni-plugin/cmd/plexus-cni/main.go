// Command plexus-cni is the chained CNI plugin that writes a meshed pod's
// traffic redirect rules into its network namespace.
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/plexus-mesh/plexus/cni-plugin/plugin"
)

func main() {
	p := plugin.New(os.Stdout)
	skel.PluginMainFuncs(p.Funcs(), plugin.PluginInfo(), "plexus-cni: chained CNI plugin of the Plexus service mesh")
}
