package meshbench

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
)

// responseBody is what the benchmark server answers: small, like an API
// response, so the proxies' overhead is what is measured.
var responseBody = []byte(`{"status":"ok","service":"meshbench"}` + "\n")

// Serve starts the benchmark server inside the server namespace on every
// path's port and returns a function that stops it.
func (t *Topology) Serve() (stop func(), err error) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(responseBody)
	})
	var servers []*http.Server
	stop = func() {
		for _, s := range servers {
			s.Close()
		}
	}
	for _, port := range []int{portDirect, portPlexus, portPeer} {
		var ln net.Listener
		// A socket belongs to the namespace it was created in, whichever
		// thread serves it later.
		err := t.serverNS.Do(func(ns.NetNS) error {
			var err error
			ln, err = net.Listen("tcp", fmt.Sprintf(":%d", port))
			return err
		})
		if err != nil {
			stop()
			return nil, fmt.Errorf("listening on :%d in %s: %w", port, t.ServerNetns, err)
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		servers = append(servers, srv)
		go srv.Serve(ln)
	}
	return stop, nil
}

// Client returns an HTTP client whose connections start in the client
// namespace, keeping up to conns idle connections.
func (t *Topology) Client(conns int) *http.Client {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := t.clientNS.Do(func(ns.NetNS) error {
			var err error
			c, err = dialer.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	return &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext:         dial,
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			DisableCompression:  true,
			IdleConnTimeout:     time.Minute,
		},
	}
}

// httpReady makes one GET through c and fails unless it answers 200: Run
// proves each path works before it measures any.
func httpReady(ctx context.Context, c *http.Client, url string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
