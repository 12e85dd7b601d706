package portforward

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
)

// A small WebSocket client (RFC 6455): the handshake goes through an
// http.Client (so that client-go's transports add the credentials of any
// kubeconfig: certificates, tokens, exec plugins) and the upgraded
// connection carries binary messages. It is what the port-forward needs
// of the protocol, no more: no extensions, messages up to maxMessage.

const (
	wsGUID     = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
	maxMessage = 1 << 20

	opContinuation = 0x0
	opText         = 0x1
	opBinary       = 0x2
	opClose        = 0x8
	opPing         = 0x9
	opPong         = 0xA
)

// wsConn is the client end of a WebSocket.
type wsConn struct {
	rwc io.ReadWriteCloser
	br  *bufio.Reader
	wmu sync.Mutex
}

// dialWebSocket upgrades a GET of url to a WebSocket speaking protocol.
// hc must speak HTTP/1.1 (an HTTP/2 connection cannot be upgraded).
func dialWebSocket(ctx context.Context, hc *http.Client, url, protocol string) (*wsConn, error) {
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		return nil, err
	}
	key := base64.StdEncoding.EncodeToString(nonce)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", key)
	req.Header.Set("Sec-WebSocket-Protocol", protocol)
	res, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	if res.StatusCode != http.StatusSwitchingProtocols {
		defer res.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
		return nil, &UpgradeError{Status: res.StatusCode, Body: strings.TrimSpace(string(b))}
	}
	rwc, ok := res.Body.(io.ReadWriteCloser)
	if !ok {
		res.Body.Close()
		return nil, errors.New("websocket: the upgraded connection is not writable")
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	if res.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		rwc.Close()
		return nil, errors.New("websocket: the server's Sec-WebSocket-Accept does not match the key")
	}
	if got := res.Header.Get("Sec-WebSocket-Protocol"); got != protocol {
		rwc.Close()
		return nil, fmt.Errorf("websocket: the server chose protocol %q, want %q", got, protocol)
	}
	return &wsConn{rwc: rwc, br: bufio.NewReader(rwc)}, nil
}

// UpgradeError is a refused upgrade: the status and what the server said.
type UpgradeError struct {
	Status int
	Body   string
}

func (e *UpgradeError) Error() string {
	return fmt.Sprintf("websocket upgrade refused: %d %s: %s", e.Status, http.StatusText(e.Status), e.Body)
}

// ReadMessage returns the next data message (fragments joined); pings
// are answered on the way. A close from the server is io.EOF.
func (c *wsConn) ReadMessage() ([]byte, error) {
	var msg []byte
	for {
		var h [2]byte
		if _, err := io.ReadFull(c.br, h[:]); err != nil {
			return nil, err
		}
		fin, op, masked := h[0]&0x80 != 0, h[0]&0x0f, h[1]&0x80 != 0
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(c.br, b[:]); err != nil {
				return nil, err
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(c.br, b[:]); err != nil {
				return nil, err
			}
			n = binary.BigEndian.Uint64(b[:])
		}
		if n > maxMessage || uint64(len(msg))+n > maxMessage {
			return nil, fmt.Errorf("websocket: a message of more than %d bytes", maxMessage)
		}
		var mask [4]byte
		if masked {
			if _, err := io.ReadFull(c.br, mask[:]); err != nil {
				return nil, err
			}
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(c.br, payload); err != nil {
			return nil, err
		}
		if masked {
			for i := range payload {
				payload[i] ^= mask[i%4]
			}
		}
		switch op {
		case opClose:
			return nil, io.EOF
		case opPing:
			if err := c.writeFrame(opPong, payload); err != nil {
				return nil, err
			}
		case opPong:
		case opContinuation, opText, opBinary:
			msg = append(msg, payload...)
			if fin {
				return msg, nil
			}
		default:
			return nil, fmt.Errorf("websocket: unknown opcode %d", op)
		}
	}
}

// WriteMessage sends p as one binary message.
func (c *wsConn) WriteMessage(p []byte) error { return c.writeFrame(opBinary, p) }

// writeFrame sends one final frame, masked as a client must.
func (c *wsConn) writeFrame(op byte, p []byte) error {
	head := []byte{0x80 | op, 0}
	switch n := len(p); {
	case n < 126:
		head[1] = byte(n)
	case n <= 0xffff:
		head[1] = 126
		head = binary.BigEndian.AppendUint16(head, uint16(n))
	default:
		head[1] = 127
		head = binary.BigEndian.AppendUint64(head, uint64(n))
	}
	head[1] |= 0x80
	var mask [4]byte
	if _, err := rand.Read(mask[:]); err != nil {
		return err
	}
	frame := make([]byte, 0, len(head)+4+len(p))
	frame = append(append(frame, head...), mask[:]...)
	for i, b := range p {
		frame = append(frame, b^mask[i%4])
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err := c.rwc.Write(frame)
	return err
}

// Close says goodbye (best effort) and closes the connection.
func (c *wsConn) Close() error {
	_ = c.writeFrame(opClose, []byte{0x03, 0xe8}) // 1000: normal closure
	return c.rwc.Close()
}
