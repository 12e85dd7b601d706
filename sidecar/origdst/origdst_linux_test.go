package origdst

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/plexus-mesh/plexus/testsupport/netnstest"
)

// TestGetRedirected creates a namespace with a veth pair and
// iptables/ip6tables OUTPUT REDIRECT rules, dials addresses on that
// interface, and checks Get reports them on the connection the listener
// accepted after redirection.
func TestGetRedirected(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t, "origdst")
	ns.Run(t, "ip", "link", "add", "d0", "type", "veth", "peer", "name", "d1")
	ns.Run(t, "ip", "link", "set", "d1", "up")
	ns.Run(t, "ip", "addr", "add", "10.250.77.1/24", "dev", "d0")
	ns.Run(t, "ip", "addr", "add", "fd00:250:77::1/64", "dev", "d0", "nodad")
	ns.Run(t, "ip", "link", "set", "d0", "up")

	for _, network := range []string{"tcp", "tcp4", "tcp6"} {
		t.Run(network, func(t *testing.T) {
			var ln net.Listener
			if err := ns.Do(func() (err error) {
				ln, err = net.Listen(network, ":0")
				return err
			}); err != nil {
				t.Fatal(err)
			}
			defer ln.Close()
			port := ln.Addr().(*net.TCPAddr).Port
			rules := fmt.Sprintf("*nat\n:OUTPUT ACCEPT [0:0]\n-A OUTPUT -p tcp -d %%s -j REDIRECT --to-ports %d\nCOMMIT\n", port)
			ns.Restore(t, false, fmt.Sprintf(rules, "10.250.77.0/24"))
			ns.Restore(t, true, fmt.Sprintf(rules, "fd00:250:77::/64"))

			var targets []netip.AddrPort
			if network != "tcp6" {
				targets = append(targets, netip.MustParseAddrPort("10.250.77.9:8080"))
			}
			if network != "tcp4" {
				targets = append(targets, netip.MustParseAddrPort("[fd00:250:77::9]:8443"))
			}
			for _, want := range targets {
				var c net.Conn
				if err := ns.Do(func() (err error) {
					c, err = net.Dial("tcp", want.String())
					return err
				}); err != nil {
					t.Fatalf("dial %s: %v", want, err)
				}
				s, err := ln.Accept()
				if err != nil {
					t.Fatal(err)
				}
				got, err := Get(s.(*net.TCPConn))
				c.Close()
				s.Close()
				if err != nil {
					t.Fatalf("Get for %s: %v", want, err)
				}
				if got != want {
					t.Errorf("Get = %s, want %s (accepted on %s)", got, want, s.LocalAddr())
				}
			}
		})
	}
}

// TestGetNotRedirected checks a direct connection does not invent a
// destination: the kernel either reports no NAT entry or its local address.
func TestGetNotRedirected(t *testing.T) {
	netnstest.RequireRoot(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := Get(s.(*net.TCPConn))
	if err == nil && got.String() != s.LocalAddr().String() {
		t.Errorf("Get = %s for a direct connection to %s", got, s.LocalAddr())
	}
}
