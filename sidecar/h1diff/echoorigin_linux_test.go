package h1diff

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// echoOrigin is the strict Go origin: a raw listener per port, Go's
// http.ReadRequest in a loop per connection, every parsed request logged
// with its body (read in full) and answered with
//
//	HTTP/1.1 200 OK, body "<METHOD> <target> <n body bytes>"
//
// A parse or body error is logged and answered 400, then the connection
// closes. With scripts (the scripted origin), a request for scriptTarget
// on a scripted port is answered with the script's raw bytes instead; any
// other request, including later ones on the same connection, is answered
// as above, so a poisoned pooled connection shows.
type echoOrigin struct {
	log     originLog
	scripts map[int]script

	mu      sync.Mutex
	conns   map[net.Conn]bool
	lns     []net.Listener
	next    int // connection serial
	stopped bool
	wg      sync.WaitGroup
}

// scriptTarget is the target of the one request a response case sends.
const scriptTarget = "/r"

// script is what the scripted origin writes for one response case.
type script struct {
	steps []step
	close bool // close the connection after the last step
}

// step writes data after a pause, then calls then if set.
type step struct {
	pause time.Duration
	data  string
	then  func()
}

// originIdle bounds how long an origin connection waits for a request.
const originIdle = 30 * time.Second

// startEchoOrigin listens on every port in the server namespace until
// t's cleanup.
func startEchoOrigin(t *testing.T, tp *topology, ports []int, scripts map[int]script) *echoOrigin {
	t.Helper()
	o := &echoOrigin{scripts: scripts, conns: map[net.Conn]bool{}}
	t.Cleanup(o.stop)
	for _, port := range ports {
		ln, err := tp.listenServer(port)
		if err != nil {
			t.Fatal(err)
		}
		o.mu.Lock()
		o.lns = append(o.lns, ln)
		o.mu.Unlock()
		o.wg.Add(1)
		go o.accept(ln, port)
	}
	return o
}

func (o *echoOrigin) stop() {
	o.mu.Lock()
	o.stopped = true
	for _, ln := range o.lns {
		ln.Close()
	}
	for c := range o.conns {
		c.Close()
	}
	o.mu.Unlock()
	o.wg.Wait()
}

func (o *echoOrigin) accept(ln net.Listener, port int) {
	defer o.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		o.mu.Lock()
		if o.stopped {
			o.mu.Unlock()
			c.Close()
			return
		}
		o.next++
		id := o.next
		o.conns[c] = true
		o.mu.Unlock()
		o.wg.Add(1)
		go func() {
			defer o.wg.Done()
			o.serve(c, port, id)
			o.mu.Lock()
			delete(o.conns, c)
			o.mu.Unlock()
			c.Close()
		}()
	}
}

func (o *echoOrigin) serve(c net.Conn, port, id int) {
	br := bufio.NewReader(c)
	for {
		c.SetReadDeadline(time.Now().Add(originIdle))
		req, err := http.ReadRequest(br)
		if err != nil {
			var ne net.Error
			if !errors.Is(err, io.EOF) && !errors.As(err, &ne) { // not the connection's end: a parse error
				o.log.add(port, &parsed{conn: id, err: err.Error()})
				io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nX-Origin: go\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
			}
			return
		}
		p := &parsed{conn: id, method: req.Method, target: req.RequestURI}
		o.log.add(port, p) // before the body: a request counts once parsed
		body, err := io.ReadAll(req.Body)
		o.log.update(func() {
			p.body = len(body)
			if err != nil {
				p.err = "body: " + err.Error()
			}
		})
		if err != nil {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nX-Origin: go\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
			return
		}
		if s, ok := o.scripts[port]; ok && req.RequestURI == scriptTarget {
			if !s.play(c) || s.close {
				return
			}
			continue
		}
		if _, err := io.WriteString(c, echoResponse(req.Method, req.RequestURI, len(body), req.Close)); err != nil || req.Close {
			return
		}
	}
}

// echoResponse is the strict origin's answer to one request.
func echoResponse(method, target string, n int, close bool) string {
	body := fmt.Sprintf("%s %s %d", method, target, n)
	head := fmt.Sprintf("HTTP/1.1 200 OK\r\nX-Origin: go\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n", len(body))
	if close {
		head += "Connection: close\r\n"
	}
	if method == http.MethodHead {
		body = ""
	}
	return head + "\r\n" + body
}

// play writes the script's steps; false when a write failed.
func (s script) play(c net.Conn) bool {
	for _, st := range s.steps {
		time.Sleep(st.pause) // Sleep: the pacing under test (a slow origin), not a wait for a condition
		if _, err := io.WriteString(c, st.data); err != nil {
			return false
		}
		if st.then != nil {
			st.then()
		}
	}
	return true
}
