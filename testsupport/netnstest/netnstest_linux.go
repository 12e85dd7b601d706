package netnstest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// RequireRoot skips t unless it runs as root with ip and iptables available.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, bin := range []string{"ip", "iptables-restore", "ip6tables-restore"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("needs %s: %v", bin, err)
		}
	}
}

// NS is a network namespace created for one test.
type NS struct {
	Name string
}

// New creates namespace proxytest-<tag>-<random> with lo up; t.Cleanup
// deletes it (and with it every interface and rule inside).
func New(t testing.TB, tag string) *NS {
	t.Helper()
	var r [3]byte
	rand.Read(r[:])
	ns := &NS{Name: "proxytest-" + tag + "-" + hex.EncodeToString(r[:])}
	Run(t, "ip", "netns", "add", ns.Name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", ns.Name, err, out)
		}
	})
	ns.Run(t, "ip", "link", "set", "lo", "up")
	return ns
}

// Run runs a command in the root namespace (only ever used for ip netns
// and ip link commands that act on our own namespaces) and fails t on error.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Run runs a command inside the namespace and fails t on error.
func (ns *NS) Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	return Run(t, "ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Command returns a command that runs inside the namespace.
func (ns *NS) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// Restore loads rules with iptables-restore (v6: ip6tables-restore) inside
// the namespace. Only the tables named in rules are replaced, and only in ns.
func (ns *NS) Restore(t testing.TB, v6 bool, rules string) {
	t.Helper()
	bin := "iptables-restore"
	if v6 {
		bin = "ip6tables-restore"
	}
	cmd := ns.Command(bin)
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s in %s: %v: %s\n%s", bin, ns.Name, err, out, rules)
	}
}

// Do runs fn on an OS thread switched into the namespace, so sockets fn
// creates (listeners, dials) live there. The thread returns to the root
// namespace afterwards; if that fails the thread is left locked and dies.
func (ns *NS) Do(fn func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open own netns: %w", err)
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns.Name)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("open netns %s: %w", ns.Name, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns.Name, err)
	}
	ferr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		return fmt.Errorf("setns back from %s: %w (thread discarded)", ns.Name, err)
	}
	runtime.UnlockOSThread()
	return ferr
}

// Veth connects a and b with a veth pair, giving each end the address in
// CIDR form (e.g. "10.250.1.1/24") and bringing both up. The pair is
// created directly inside a's namespace, so the root namespace never holds it.
func Veth(t testing.TB, a *NS, aAddr string, b *NS, bAddr string) {
	t.Helper()
	a.Run(t, "ip", "link", "add", "va", "type", "veth", "peer", "name", "vb", "netns", b.Name)
	a.Run(t, "ip", "addr", "add", aAddr, "dev", "va")
	b.Run(t, "ip", "addr", "add", bAddr, "dev", "vb")
	a.Run(t, "ip", "link", "set", "va", "up")
	b.Run(t, "ip", "link", "set", "vb", "up")
}

// InboundSourceEnv is the proxy environment the injector sets along with
// the rules MeshRules writes (podcontract.EnvInboundSource). A proxy started
// without it dials the application unbound, and the self-call rule would
// send those dials back to its inbound side.
const InboundSourceEnv = podcontract.EnvInboundSource + "=" + podcontract.DefaultInboundSource

// MeshRules returns the iptables-restore input the CNI plugin writes
// (rules.Build, ARCHITECTURE.md §3; IPv6 when v6) into a pod whose proxy has
// these ports, runs as UID and GID uid, and binds the injector's inbound
// source (InboundSourceEnv): PREROUTING → PLEXUS_INBOUND (admin port
// returned, the rest redirected to inbound); OUTPUT → PLEXUS_OUTPUT (the
// inbound source on lo returned, the proxy's connections to the pod's own
// addresses sent to PLEXUS_INBOUND, proxy UID/GID and -o lo returned, the
// rest redirected to outbound).
func MeshRules(t testing.TB, v6 bool, inbound, outbound, admin, uid int) string {
	t.Helper()
	c := podcontract.Config{
		InboundPort: uint16(inbound), OutboundPort: uint16(outbound), AdminPort: uint16(admin),
		ProxyUID: uint32(uid), ProxyGID: uint32(uid),
	}
	var err error
	if c.InboundSource, err = podcontract.ParseInboundSource(podcontract.DefaultInboundSource); err != nil {
		t.Fatal(err)
	}
	fam := rules.IPv4
	if v6 {
		fam = rules.IPv6
	}
	rs, err := rules.Build(c, fam)
	if err != nil {
		t.Fatal(err)
	}
	return rules.RenderApply(rs, rules.State{})
}
