package h1diff

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/testsupport/eventually"
	"github.com/plexus-mesh/plexus/testsupport/netnstest"
)

// The two namespaces' addresses, inside 10.250.0.0/16 and apart from the
// 10.250.5.0/24 other tests use.
const (
	clientCIDR = "10.250.12.1/24"
	serverCIDR = "10.250.12.2/24"
	serverIP   = "10.250.12.2"
)

// The proxy's ports and UID, as the injector and the CNI rules set them.
const (
	inboundPort  = 4143
	outboundPort = 4140
	adminPort    = 4191
	proxyUID     = 2102
)

// topology is a client namespace and a server namespace joined by a veth,
// each with the mesh rules and a plexus-proxy. A client connection to
// serverIP:port goes client → outbound proxy → inbound proxy → whatever
// listens on port in the server namespace.
type topology struct {
	client, server *netnstest.NS
}

// newTopology sets everything up; t.Cleanup stops the proxies (printing
// their logs if t failed) and deletes the namespaces.
func newTopology(t *testing.T) *topology {
	t.Helper()
	if proxyBin == "" {
		t.Fatalf("no plexus-proxy binary: %v", buildErr)
	}
	tp := &topology{client: netnstest.New(t, "h1c"), server: netnstest.New(t, "h1s")}
	netnstest.Veth(t, tp.client, clientCIDR, tp.server, serverCIDR)
	for _, ns := range []*netnstest.NS{tp.client, tp.server} {
		ns.Restore(t, false, netnstest.MeshRules(t, false, inboundPort, outboundPort, adminPort, proxyUID))
		startProxy(t, ns)
	}
	return tp
}

// startProxy runs the proxy binary in ns as the proxy UID (as
// integration/meshbench does) and waits until /ready answers 200.
func startProxy(t *testing.T, ns *netnstest.NS) {
	t.Helper()
	uid := strconv.Itoa(proxyUID)
	cmd := exec.Command("ip", "netns", "exec", ns.Name,
		"setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", proxyBin)
	cmd.Env = append(os.Environ(), "PLEXUS_PROXY_LOG_LEVEL=debug", "PLEXUS_PROXY_DETECT_TIMEOUT=500ms", netnstest.InboundSourceEnv)
	logs := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("plexus-proxy logs in %s:\n%s", ns.Name, logs.String())
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := adminReady(ns)
		if err == nil {
			return
		}
		select {
		case <-exited:
			t.Fatalf("plexus-proxy in %s exited: %v\n%s", ns.Name, cmd.ProcessState, logs.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("plexus-proxy in %s not ready after 10 s: %v\n%s", ns.Name, err, logs.String())
		}
	}
}

// adminReady asks the proxy in ns for /ready, from inside ns.
func adminReady(ns *netnstest.NS) error {
	c, err := dialIn(ns, fmt.Sprintf("127.0.0.1:%d", adminPort))
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("GET /ready HTTP/1.1\r\nHost: admin\r\nConnection: close\r\n\r\n")); err != nil {
		return err
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("/ready: %s", res.Status)
	}
	return nil
}

// dialIn opens a TCP connection from inside ns.
func dialIn(ns *netnstest.NS, addr string) (net.Conn, error) {
	var c net.Conn
	err := ns.Do(func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 2*time.Second)
		return err
	})
	return c, err
}

// dialServer opens a client connection to serverIP:port from the client
// namespace; its mesh rules send it through both proxies.
func (tp *topology) dialServer(port int) (net.Conn, error) {
	return dialIn(tp.client, fmt.Sprintf("%s:%d", serverIP, port))
}

// listenServer opens a listener on port in the server namespace.
func (tp *topology) listenServer(port int) (net.Listener, error) {
	var ln net.Listener
	err := tp.server.Do(func() (err error) {
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
		return err
	})
	return ln, err
}

// startInServer runs a command in the server namespace in its own process
// group; t.Cleanup ends the group (SIGTERM, then SIGKILL after 5 s).
func (tp *topology) startInServer(t *testing.T, logs *syncBuffer, name string, args ...string) {
	t.Helper()
	cmd := tp.server.Command(name, args...)
	cmd.Stdout, cmd.Stderr = logs, logs
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
	})
}

// waitListening waits until something accepts on port in the server
// namespace.
func (tp *topology) waitListening(port int) error {
	var err error
	eventually.Holds(10*time.Second, func() bool {
		var c net.Conn
		if c, err = dialIn(tp.server, fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			c.Close()
			return true
		}
		return !errors.Is(err, syscall.ECONNREFUSED) // another error ends the wait
	})
	if err != nil {
		return fmt.Errorf("nothing listens on %d in %s: %w", port, tp.server.Name, err)
	}
	return nil
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
