// Command coredns is CoreDNS with the plugins the local cluster's Corefile
// names (integration/cluster/coredns.yaml) and no others: the full build
// compiles every plugin's dependencies, the cloud providers' SDKs among
// them, for a DNS server that serves one cluster's names. A plugin the
// Corefile names and this build lacks fails CoreDNS at start with
// "unknown directive".
package main

import (
	"github.com/coredns/coredns/coremain"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/template"
)

func main() { coremain.Run() }
