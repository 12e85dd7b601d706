// Package meshbench measures the meshed path against the direct path and
// against a peer proxy pair, in one run on one pair of network namespaces:
// a client namespace and a server namespace joined by a veth, with
// iptables REDIRECT rules like those plexus-cni writes. Each path has its
// own server port, so the three are measured side by side:
//
//	direct  client -> server:8080
//	plexus  client -> [4140 plexus-proxy] -> [4143 plexus-proxy] -> server:8081
//	peer    client -> [4240 nginx]        -> [4243 nginx]        -> server:8082
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

// Ports of the three paths on the server, and the proxies' listeners.
const (
	portDirect = 8080
	portPlexus = 8081
	portPeer   = 8082

	plexusOutbound = 4140
	plexusInbound  = 4143
	peerOutbound   = 4240
	peerInbound    = 4243

	proxyUID = 2102
	// peerUser runs the peer proxy's workers; their own connections are
	// exempt from redirection as the Plexus proxy's UID is.
	peerUser = "www-data"
)

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
	return fmt.Sprintf(`*nat
:MESHBENCH_OUTPUT - [0:0]
-A OUTPUT -p tcp -j MESHBENCH_OUTPUT
-A MESHBENCH_OUTPUT -m owner --uid-owner %d -j RETURN
-A MESHBENCH_OUTPUT -m owner --uid-owner %s -j RETURN
-A MESHBENCH_OUTPUT -p tcp --dport %d -j REDIRECT --to-ports %d
-A MESHBENCH_OUTPUT -p tcp --dport %d -j REDIRECT --to-ports %d
COMMIT
`, proxyUID, peerUser, portPlexus, plexusOutbound, portPeer, peerOutbound)
}

// serverRules redirect inbound connections to each path's server sidecar.
func serverRules() string {
	return fmt.Sprintf(`*nat
-A PREROUTING -p tcp --dport %d -j REDIRECT --to-ports %d
-A PREROUTING -p tcp --dport %d -j REDIRECT --to-ports %d
COMMIT
`, portPlexus, plexusInbound, portPeer, peerInbound)
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
