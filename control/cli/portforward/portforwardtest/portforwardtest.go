// Package portforwardtest serves pods/portforward as the kubelet does,
// for tests of port-forward clients.
package portforwardtest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/websocket"

	"github.com/plexus-mesh/plexus/control/cli/portforward"
)

// The channels of the first forwarded port.
const (
	dataChannel  = 0
	errorChannel = 1
)

// APIServer serves pods/portforward as the kubelet does (its
// WebSocket protocol, on golang.org/x/net/websocket as the kubelet's
// wsstream), relaying each forwarded connection to Target (the pod's
// port), or to Targets["NAMESPACE/POD:PORT"] when it names the pod and
// port; Refuse, when set, answers every forward on the error channel.
type APIServer struct {
	Target  string
	Targets map[string]string
	Refuse  string
	mu      sync.Mutex
	paths   []string
}

// Paths are the request URIs the server was asked, in order.
func (f *APIServer) Paths() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.paths...)
}

func (f *APIServer) Start(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(f.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"kind":"Status","message":"forbidden"}`, http.StatusForbidden)
	})))
	t.Cleanup(srv.Close)
	return srv
}

// Wrap serves pods/portforward, and everything else with rest.
func (f *APIServer) Wrap(rest http.Handler) http.Handler {
	ws := websocket.Server{
		Handshake: func(cfg *websocket.Config, r *http.Request) error {
			for _, p := range cfg.Protocol {
				if p == portforward.PortForwardProtocol {
					cfg.Protocol = []string{p}
					return nil
				}
			}
			return fmt.Errorf("protocols %v not supported", cfg.Protocol)
		},
		Handler: func(c *websocket.Conn) {
			defer c.Close()
			c.PayloadType = websocket.BinaryFrame
			var port [2]byte
			binary.LittleEndian.PutUint16(port[:], 8084)
			_ = websocket.Message.Send(c, append([]byte{dataChannel}, port[:]...))
			_ = websocket.Message.Send(c, append([]byte{errorChannel}, port[:]...))
			if f.Refuse != "" {
				_ = websocket.Message.Send(c, append([]byte{errorChannel}, f.Refuse...))
				return
			}
			pod, err := net.Dial("tcp", f.target(c.Request()))
			if err != nil {
				return
			}
			defer pod.Close()
			go func() {
				buf := make([]byte, 70000)
				for {
					n, err := pod.Read(buf)
					if n > 0 {
						if websocket.Message.Send(c, append([]byte{dataChannel}, buf[:n]...)) != nil {
							return
						}
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
			for {
				var msg []byte
				if err := websocket.Message.Receive(c, &msg); err != nil {
					return
				}
				if len(msg) > 0 && msg[0] == dataChannel {
					if _, err := pod.Write(msg[1:]); err != nil {
						return
					}
				}
			}
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.paths = append(f.paths, r.URL.RequestURI())
		f.mu.Unlock()
		if !strings.HasPrefix(r.URL.Path, "/api/v1/") || !strings.HasSuffix(r.URL.Path, "/portforward") {
			rest.ServeHTTP(w, r)
			return
		}
		ws.ServeHTTP(w, r)
	})
}

// target is where a forward asked by r goes.
func (f *APIServer) target(r *http.Request) string {
	// /api/v1/namespaces/NS/pods/POD/portforward?ports=PORT
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	if len(parts) == 7 {
		if t, ok := f.Targets[parts[3]+"/"+parts[5]+":"+r.URL.Query().Get("ports")]; ok {
			return t
		}
	}
	return f.Target
}

// EchoServer answers each line with it upper-cased.
func EchoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, upper{c})
			}()
		}
	}()
	return ln.Addr().String()
}

type upper struct{ r io.Reader }

func (u upper) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	copy(p, bytes.ToUpper(p[:n]))
	return n, err
}
