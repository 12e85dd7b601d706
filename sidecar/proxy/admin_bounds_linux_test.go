package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/sidecar/config"
)

// TestAdminPortBounds holds 3,000 keep-alive connections on a proxy's
// admin port from another pod, as an attacker would: at most
// adminMaxPerSource are served and the rest reset and counted, another
// address (the kubelet's, say) is still served meanwhile, the proxy's
// peak RSS stays far inside its 128 MiB limit, every served connection is
// closed after the idle timeout, and the same holds on the redirect probe
// port (whose connections also keep their inbound slot). A refused
// request closes its connection.
func TestAdminPortBounds(t *testing.T) {
	m := newTopology(t, false)
	const idle = 3 * time.Second
	server := launchProxy(t, m.server.ns, true, "PLEXUS_PROXY_ADMIN_IDLE_TIMEOUT="+idle.String(), "PLEXUS_PROXY_REDIRECT_PROBE_PORT=4192")
	pid := server.cmd.Process.Pid
	// A second address in the client's namespace: the prober's.
	const prober = "10.250.5.9"
	m.client.ns.Run(t, "ip", "addr", "add", prober+"/24", "dev", "va")

	for _, tc := range []struct {
		port, dir string
		conns     int
	}{{"4191", limitAdmin, 3000}, {"4192", limitProbe, 500}} {
		t.Run(tc.dir, func(t *testing.T) {
			resetPeakRSS(t, pid)
			before := procStatusMB(t, pid, "VmRSS:")
			exceeded0 := sumSamples(server.scrape(t), "limit_exceeded_total", map[string]string{"direction": tc.dir, "limit": "connections"})
			served, expired, refused := holdAdminConns(t, m.client, serverIP+":"+tc.port, tc.conns)
			peak := procStatusMB(t, pid, "VmHWM:")
			t.Logf("%d connections to :%s: %d served and held, %d served and closed idle meanwhile, %d refused; proxy RSS %.1f MB before, peak %.1f MB",
				tc.conns, tc.port, len(served), expired, refused, before, peak)
			defer func() {
				for _, c := range served {
					c.Close()
				}
			}()
			if len(served) > adminMaxPerSource || len(served) == 0 {
				t.Errorf("%d connections from one address served at once, want 1 to %d (of %d in all)", len(served), adminMaxPerSource, config.DefaultAdminMaxConnections)
			}
			if code, err := getFrom(m.client, prober, serverIP+":"+tc.port, "/live"); err != nil || code != http.StatusOK {
				t.Errorf("another address, while one holds its connections: %d %v, want 200", code, err)
			}
			if len(served)+expired+refused != tc.conns {
				t.Errorf("%d served + %d closed idle + %d refused of %d", len(served), expired, refused, tc.conns)
			}
			if peak-before > 16 || peak > 64 {
				t.Errorf("the proxy's RSS went from %.1f to a peak of %.1f MB, want within 16 MB of it and under 64 MB (its limit is 128 MiB)", before, peak)
			}
			// Every held connection is closed by the proxy once idle.
			deadline := time.Now().Add(idle + 5*time.Second)
			for i, c := range served {
				c.SetReadDeadline(deadline)
				if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
					t.Fatalf("held connection %d still open %s after its last request (idle timeout %s): %v", i, idle+5*time.Second, idle, err)
				}
			}
			// Scraped once the held connections are gone: the port is full
			// until then.
			if got := sumSamples(server.scrape(t), "limit_exceeded_total", map[string]string{"direction": tc.dir, "limit": "connections"}) - exceeded0; got != float64(refused) {
				t.Errorf("limit_exceeded_total{direction=%q,limit=connections} rose by %v, want %d", tc.dir, got, refused)
			}
		})
	}

	// A request refused (here: /endpoints from another pod) closes its
	// connection: the client learns so from the response.
	c, err := m.client.dial(context.Background(), serverIP+":4191")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET /endpoints HTTP/1.1\r\nHost: x\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || !res.Close {
		t.Errorf("/endpoints from another pod: %d, close %v; want 403 and the connection closed", res.StatusCode, res.Close)
	}
}

// holdAdminConns opens n connections to addr from p, sends each one
// request and reads its answer, and returns those that were served (kept
// alive) and are still open, how many were served and then closed by the
// proxy's idle timeout before the last was tried (on a loaded machine the
// n tries can outlast it, and a slot freed so is rightly taken again),
// and how many were refused without an answer.
func holdAdminConns(t *testing.T, p *pod, addr string, n int) (served []net.Conn, expired, refused int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	var failed error
	for range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := p.dial(ctx, addr)
			if err != nil {
				mu.Lock()
				refused++
				mu.Unlock()
				return
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			_, err = io.WriteString(c, "GET /live HTTP/1.1\r\nHost: x\r\n\r\n")
			var res *http.Response
			if err == nil {
				res, err = http.ReadResponse(bufio.NewReader(c), nil)
			}
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil && res.StatusCode == http.StatusOK && !res.Close:
				io.Copy(io.Discard, res.Body)
				c.SetDeadline(time.Time{})
				served = append(served, c)
			case err != nil && !isTimeout(err) && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "reset")):
				c.Close()
				refused++
			default:
				c.Close()
				if failed == nil {
					failed = errors.Join(err, errors.New("unexpected answer"))
				}
			}
		}()
	}
	wg.Wait()
	if failed != nil {
		t.Fatalf("a connection was neither served nor refused: %v", failed)
	}
	open := served[:0]
	for _, c := range served {
		c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); isTimeout(err) {
			c.SetReadDeadline(time.Time{})
			open = append(open, c)
			continue
		}
		c.Close()
		expired++
	}
	return open, expired, refused
}

// getFrom sends one GET from p's namespace with source address src and
// closes the connection.
func getFrom(p *pod, src, addr, path string) (int, error) {
	var c net.Conn
	err := p.ns.Do(func() (err error) {
		d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err = d.Dial("tcp", addr)
		return err
	})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, err
	}
	res.Body.Close()
	return res.StatusCode, nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
