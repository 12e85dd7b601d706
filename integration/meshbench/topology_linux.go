// Package meshbench measures the meshed path against the direct path and
// against peer proxy pairs, in one run on one pair of network namespaces:
// a client namespace and a server namespace joined by a veth, with
// iptables REDIRECT rules like those plexus-cni writes. Each path has its
// own server port, so all are measured side by side:
//
//	direct        client -> server:8080
//	plexus        client -> [4140 plexus-proxy] -> [4143 plexus-proxy] -> server:8081
//	nginx         client -> [4240 nginx]        -> [4243 nginx]        -> server:8082
//	plexus-mtls   client -> [4150 plexus-proxy] =mTLS=> [4153 plexus-proxy] -> server:8083
//	nginx-mtls    client -> [4250 nginx]        =mTLS=> [4253 nginx]        -> server:8084
//	haproxy-mtls  client -> [4260 haproxy]      =mTLS=> [4263 haproxy]      -> server:8085
//
// and for HTTP/2 (h2c from the client, h2 over mTLS between the sides):
//
//	                h2c    gRPC   listeners (h2c, gRPC) client side; server side
//	direct          8090   8092
//	plexus-mtls     8091   8093   4150; 4153
//	nginx-h2-mtls   8094   8095   4270, 4271; 4273, 4274
//	haproxy-h2-mtls 8096   8097   4280, 4281; 4283, 4284
//
// The plexus mTLS pair talks to the real identity and destination
// services (controlplane_linux.go).
package meshbench

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"

	"github.com/containernetworking/plugins/pkg/ns"
)

// Addresses inside the benchmark's own namespaces; nothing outside them
// routes to these.
var (
	clientAddr = netip.MustParsePrefix("10.251.0.1/24")
	serverAddr = netip.MustParsePrefix("10.251.0.2/24")
)

// Ports of the paths on the server, and the sidecars' listeners.
const (
	portDirect      = 8080
	portPlexus      = 8081
	portNginx       = 8082
	portPlexusMTLS  = 8083
	portNginxMTLS   = 8084
	portHAProxyMTLS = 8085
	portDirectH2C   = 8090
	portPlexusH2C   = 8091
	portDirectGRPC  = 8092
	portPlexusGRPC  = 8093
	portNginxH2C    = 8094
	portNginxGRPC   = 8095
	portHAProxyH2C  = 8096
	portHAProxyGRPC = 8097

	plexusOutbound      = 4140
	plexusInbound       = 4143
	plexusMTLSOutbound  = 4150
	plexusMTLSInbound   = 4153
	nginxOutbound       = 4240
	nginxInbound        = 4243
	nginxMTLSOutbound   = 4250
	nginxMTLSInbound    = 4253
	haproxyOutbound     = 4260
	haproxyInbound      = 4263
	nginxH2COutbound    = 4270
	nginxGRPCOutbound   = 4271
	nginxH2CInbound     = 4273
	nginxGRPCInbound    = 4274
	haproxyH2COutbound  = 4280
	haproxyGRPCOutbound = 4281
	haproxyH2CInbound   = 4283
	haproxyGRPCInbound  = 4284

	proxyUID = 2102
	// peerUser runs the peer proxies' workers; their own connections are
	// exempt from redirection as the Plexus proxy's UID is.
	peerUser = "www-data"
)

// redirects are the server ports each pair of sidecar listeners takes:
// {server port, outbound listener, inbound listener}.
var redirects = [][3]int{
	{portPlexus, plexusOutbound, plexusInbound},
	{portNginx, nginxOutbound, nginxInbound},
	{portPlexusMTLS, plexusMTLSOutbound, plexusMTLSInbound},
	{portPlexusH2C, plexusMTLSOutbound, plexusMTLSInbound},
	{portPlexusGRPC, plexusMTLSOutbound, plexusMTLSInbound},
	{portNginxMTLS, nginxMTLSOutbound, nginxMTLSInbound},
	{portHAProxyMTLS, haproxyOutbound, haproxyInbound},
	{portNginxH2C, nginxH2COutbound, nginxH2CInbound},
	{portNginxGRPC, nginxGRPCOutbound, nginxGRPCInbound},
	{portHAProxyH2C, haproxyH2COutbound, haproxyH2CInbound},
	{portHAProxyGRPC, haproxyGRPCOutbound, haproxyGRPCInbound},
}

// Topology is the pair of namespaces.
type Topology struct {
	ClientNetns, ServerNetns string // names under /run/netns
	clientNS, serverNS       ns.NetNS
}

// NewTopology creates the namespaces, the veth between them and the
// redirect rules. Call Close to remove everything.
func NewTopology() (*Topology, error) {
	id := os.Getpid()
	t := &Topology{ClientNetns: fmt.Sprintf("meshbench-c-%d", id), ServerNetns: fmt.Sprintf("meshbench-s-%d", id)}
	if err := t.setUp(); err != nil {
		t.Close()
		return nil, err
	}
	return t, nil
}

func (t *Topology) setUp() error {
	steps := [][]string{
		{"netns", "add", t.ClientNetns},
		{"netns", "add", t.ServerNetns},
		{"link", "add", "mb0", "netns", t.ClientNetns, "type", "veth", "peer", "name", "mb0", "netns", t.ServerNetns},
		{"-n", t.ClientNetns, "addr", "add", clientAddr.String(), "dev", "mb0"},
		{"-n", t.ServerNetns, "addr", "add", serverAddr.String(), "dev", "mb0"},
	}
	for _, n := range []string{t.ClientNetns, t.ServerNetns} {
		steps = append(steps, []string{"-n", n, "link", "set", "lo", "up"}, []string{"-n", n, "link", "set", "mb0", "up"})
	}
	for _, args := range steps {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	var err error
	if t.clientNS, err = ns.GetNS("/run/netns/" + t.ClientNetns); err != nil {
		return err
	}
	if t.serverNS, err = ns.GetNS("/run/netns/" + t.ServerNetns); err != nil {
		return err
	}
	if err := restore(t.ClientNetns, clientRules()); err != nil {
		return fmt.Errorf("client rules: %w", err)
	}
	if err := restore(t.ServerNetns, serverRules()); err != nil {
		return fmt.Errorf("server rules: %w", err)
	}
	return nil
}

// clientRules redirect the client's outbound connections to the sidecar of
// each path, exempting the sidecars' own connections.
func clientRules() string {
	var b strings.Builder
	fmt.Fprintf(&b, "*nat\n:MESHBENCH_OUTPUT - [0:0]\n-A OUTPUT -p tcp -j MESHBENCH_OUTPUT\n")
	fmt.Fprintf(&b, "-A MESHBENCH_OUTPUT -m owner --uid-owner %d -j RETURN\n", proxyUID)
	fmt.Fprintf(&b, "-A MESHBENCH_OUTPUT -m owner --uid-owner %s -j RETURN\n", peerUser)
	for _, r := range redirects {
		fmt.Fprintf(&b, "-A MESHBENCH_OUTPUT -p tcp --dport %d -j REDIRECT --to-ports %d\n", r[0], r[1])
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

// serverRules redirect inbound connections to each path's server sidecar.
func serverRules() string {
	var b strings.Builder
	b.WriteString("*nat\n")
	for _, r := range redirects {
		fmt.Fprintf(&b, "-A PREROUTING -p tcp --dport %d -j REDIRECT --to-ports %d\n", r[0], r[2])
	}
	b.WriteString("COMMIT\n")
	return b.String()
}

func restore(netns, rules string) error {
	cmd := exec.Command("ip", "netns", "exec", netns, "iptables-restore", "--noflush", "--wait")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("iptables-restore in %s: %w: %s", netns, err, out)
	}
	return nil
}

// Close deletes both namespaces, which takes the veth and rules with them.
func (t *Topology) Close() error {
	var errs []string
	for _, h := range []ns.NetNS{t.clientNS, t.serverNS} {
		if h != nil {
			h.Close()
		}
	}
	for _, n := range []string{t.ClientNetns, t.ServerNetns} {
		if _, err := os.Stat("/run/netns/" + n); err != nil {
			continue
		}
		if out, err := exec.Command("ip", "netns", "del", n).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Sprintf("ip netns del %s: %v: %s", n, err, out))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("meshbench cleanup: %s", strings.Join(errs, "; "))
	}
	return nil
}

// URL is the address the client uses for a path's server port.
func URL(port int) string {
	return fmt.Sprintf("http://%s:%d/", serverAddr.Addr(), port)
}
