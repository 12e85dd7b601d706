package portforward

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"k8s.io/client-go/rest"
)

// PortForwardProtocol is the kubelet's WebSocket port-forward protocol:
// per forwarded port a data channel and an error channel, each message
// prefixed with its channel's number, the first message of each channel
// the port (2 bytes, little-endian); one WebSocket per TCP connection.
// The API server passes it through to the kubelet, which hands it to the
// container runtime's streaming server.
const PortForwardProtocol = "v4.channel.k8s.io"

// Channels of the first (only) forwarded port.
const (
	dataChannel  = 0
	errorChannel = 1
)

// PodDialer opens TCP connections to pods' ports through the API
// server's pods/portforward, with the caller's credentials (RBAC: create
// on pods/portforward).
type PodDialer struct {
	// HTTP speaks HTTP/1.1 to the API server, with credentials.
	HTTP *http.Client
	// BaseURL is the API server's URL (https://host:port[/prefix]).
	BaseURL string
}

// Dial connects to port of pod ns/name.
func (d PodDialer) Dial(ctx context.Context, ns, pod string, port uint16) (io.ReadWriteCloser, error) {
	u := fmt.Sprintf("%s/api/v1/namespaces/%s/pods/%s/portforward?ports=%d", d.BaseURL, url.PathEscape(ns), url.PathEscape(pod), port)
	ws, err := dialWebSocket(ctx, d.HTTP, u, PortForwardProtocol)
	if err != nil {
		return nil, fmt.Errorf("port-forward to %s/%s:%d: %w", ns, pod, port, err)
	}
	return &podStream{ws: ws, name: fmt.Sprintf("%s/%s:%d", ns, pod, port)}, nil
}

// podStream is one TCP connection through a port-forward WebSocket.
type podStream struct {
	ws      *wsConn
	name    string
	pending []byte
	// seenPort: the channel's first message (its port) was read.
	seenPort [2]bool
}

func (s *podStream) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		msg, err := s.ws.ReadMessage()
		if err != nil {
			return 0, err
		}
		if len(msg) == 0 {
			continue
		}
		ch, data := msg[0], msg[1:]
		if ch > errorChannel {
			return 0, fmt.Errorf("port-forward to %s: a message on channel %d", s.name, ch)
		}
		if !s.seenPort[ch] {
			if len(data) < 2 {
				return 0, fmt.Errorf("port-forward to %s: a short port message", s.name)
			}
			s.seenPort[ch] = true
			data = data[2:]
		}
		if ch == errorChannel {
			if len(data) > 0 {
				return 0, fmt.Errorf("port-forward to %s: %s", s.name, data)
			}
			continue
		}
		s.pending = data
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// Write sends p to the pod, in messages of at most 32 KiB.
func (s *podStream) Write(p []byte) (int, error) {
	const chunk = 32 << 10
	written := 0
	for len(p) > 0 {
		n := min(len(p), chunk)
		if err := s.ws.WriteMessage(append([]byte{dataChannel}, p[:n]...)); err != nil {
			return written, err
		}
		written += n
		p = p[n:]
	}
	return written, nil
}

func (s *podStream) Close() error { return s.ws.Close() }

// Forward accepts connections on ln until ctx ends, and relays each to a
// connection dial opens; a failed dial is reported to report, and that
// one connection closed.
func Forward(ctx context.Context, ln net.Listener, dial func(context.Context) (io.ReadWriteCloser, error), report func(error)) error {
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("accepting on %s: %w", ln.Addr(), err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			remote, err := dial(ctx)
			if err != nil {
				report(err)
				return
			}
			relay(ctx, c, remote)
		}()
	}
}

// relay copies both ways until either side ends (the protocol has no
// half-close), or ctx does.
func relay(ctx context.Context, local net.Conn, remote io.ReadWriteCloser) {
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(remote, local); done <- struct{}{} }()
	go func() { _, _ = io.Copy(local, remote); done <- struct{}{} }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	remote.Close()
	local.Close()
	<-done
}

// NewPodDialer returns a PodDialer with cfg's credentials, speaking
// HTTP/1.1 (an HTTP/2 connection cannot be upgraded to a WebSocket).
func NewPodDialer(cfg *rest.Config) (PodDialer, error) {
	h1 := rest.CopyConfig(cfg)
	h1.TLSClientConfig.NextProtos = []string{"http/1.1"}
	hc, err := rest.HTTPClientFor(h1)
	if err != nil {
		return PodDialer{}, fmt.Errorf("HTTP client for the API server: %w", err)
	}
	base, _, err := rest.DefaultServerUrlFor(h1)
	if err != nil {
		return PodDialer{}, fmt.Errorf("the API server's address: %w", err)
	}
	return PodDialer{HTTP: hc, BaseURL: strings.TrimSuffix(base.String(), "/")}, nil
}

// Get asks GET path of pod ns/name's port through a port-forward: the
// request arrives on the pod's loopback, as from inside the pod.
func (d PodDialer) Get(ctx context.Context, ns, pod string, port uint16, path string) (*http.Response, []byte, error) {
	c, err := d.Dial(ctx, ns, pod, port)
	if err != nil {
		return nil, nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n", path); err != nil {
		return nil, nil, fmt.Errorf("port-forward to %s/%s:%d: %w", ns, pod, port, err)
	}
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return nil, nil, fmt.Errorf("port-forward to %s/%s:%d: reading the answer to GET %s: %w", ns, pod, port, path, err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(io.LimitReader(res.Body, maxGetBody))
	if err != nil {
		return nil, nil, fmt.Errorf("port-forward to %s/%s:%d: reading the body of GET %s: %w", ns, pod, port, path, err)
	}
	return res, body, nil
}

// maxGetBody bounds what Get reads of an answer.
const maxGetBody = 64 << 20
