package h2transport

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Flow-control windows this client offers (RFC 9113 §6.9): a stream may
// have streamWindow bytes of response body in flight, unread, and a
// connection connWindow over all its streams. They bound what a slow
// reader makes the proxy hold: 256 KiB a stream, 4 MiB a connection.
const (
	streamWindow = 256 << 10
	connWindow   = 4 << 20
	// initialWindow is the protocol's window before SETTINGS say otherwise.
	initialWindow = 65535
	// maxFrameRead is the largest frame accepted (SETTINGS_MAX_FRAME_SIZE
	// stays at the protocol's 16 KiB default; this is what ReadFrame
	// allows).
	maxFrameRead = 16 << 10
)

// conn is one HTTP/2 connection and its streams.
type conn struct {
	t    *Transport
	addr string
	nc   net.Conn
	fr   *http2.Framer
	done chan struct{} // closed when the connection ends

	// wmu guards the write side: bw (under fr's writes), the header
	// encoder, stream ids (which must rise in the order HEADERS go out)
	// and werr.
	wmu    sync.Mutex
	bw     *bufio.Writer
	henc   *hpack.Encoder
	hbuf   bytes.Buffer
	nextID uint32
	werr   error
	kick   chan struct{} // holds one token while bw has bytes to flush

	// mu guards the rest.
	mu         sync.Mutex
	cond       *sync.Cond // a send window grew, a stream ended, or the connection did
	streams    map[uint32]*stream
	reserved   int    // RoundTrips that chose this connection and have no stream yet
	maxStreams uint32 // SETTINGS_MAX_CONCURRENT_STREAMS of the peer
	sendWindow int64  // what the peer lets us send on the connection
	initSend   int32  // SETTINGS_INITIAL_WINDOW_SIZE of the peer
	maxFrame   uint32 // SETTINGS_MAX_FRAME_SIZE of the peer
	recvWindow int32  // what we let the peer send on the connection
	recvUnack  int32  // read by streams (or dropped) and not yet given back
	goAway     bool
	lastStream uint32 // the GOAWAY's last stream id
	closed     bool
	err        error // why it closed
	idle       *time.Timer
}

// newConn starts HTTP/2 on nc: the preface and settings both ways. It
// waits for the server's SETTINGS (within ctx, or settingsTimeout) so
// that no stream goes out past the server's stream limit, and so that a
// server that does not speak HTTP/2 is told apart from one that fails a
// request.
func newConn(ctx context.Context, t *Transport, addr string, nc net.Conn) (*conn, error) {
	c := &conn{
		t: t, addr: addr, nc: nc, done: make(chan struct{}), kick: make(chan struct{}, 1),
		nextID: 1, streams: map[uint32]*stream{}, maxStreams: 100,
		sendWindow: initialWindow, initSend: initialWindow, maxFrame: 16 << 10,
		recvWindow: connWindow,
	}
	c.cond = sync.NewCond(&c.mu)
	c.bw = bufio.NewWriterSize(deadlineWriter{nc, t.WriteTimeout}, 16<<10)
	c.fr = http2.NewFramer(c.bw, bufio.NewReaderSize(nc, 16<<10))
	c.fr.SetMaxReadFrameSize(maxFrameRead)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = uint32(t.maxHeaderBytes())
	c.henc = hpack.NewEncoder(&c.hbuf)

	// The preface, our settings and the connection's window, in one write.
	c.bw.WriteString(http2.ClientPreface)
	c.fr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: streamWindow},
		http2.Setting{ID: http2.SettingMaxHeaderListSize, Val: c.fr.MaxHeaderListSize},
	)
	c.fr.WriteWindowUpdate(0, connWindow-initialWindow)
	if err := c.bw.Flush(); err != nil {
		return nil, fmt.Errorf("h2transport: writing the connection preface to %s: %w", addr, err)
	}
	deadline, ok := ctx.Deadline()
	if !ok || time.Until(deadline) > settingsTimeout {
		deadline = time.Now().Add(settingsTimeout)
	}
	nc.SetReadDeadline(deadline)
	f, err := c.fr.ReadFrame()
	nc.SetReadDeadline(time.Time{})
	if err != nil {
		return nil, fmt.Errorf("h2transport: %s sent no HTTP/2 settings: %w", addr, err)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return nil, fmt.Errorf("h2transport: %s began with a %v frame, not SETTINGS: not an HTTP/2 server", addr, f.Header().Type)
	}
	if err := c.onSettings(sf); err != nil {
		return nil, fmt.Errorf("h2transport: the settings of %s: %w", addr, err)
	}
	c.fr.WriteSettingsAck()
	if err := c.bw.Flush(); err != nil {
		return nil, fmt.Errorf("h2transport: writing to %s: %w", addr, err)
	}
	go c.readLoop()
	go c.flushLoop()
	return c, nil
}

func (t *Transport) maxHeaderBytes() int64 {
	if t.MaxResponseHeaderBytes > 0 {
		return t.MaxResponseHeaderBytes
	}
	return 64 << 10
}

// deadlineWriter gives each write to the connection WriteTimeout to make
// progress.
type deadlineWriter struct {
	nc      net.Conn
	timeout time.Duration
}

func (w deadlineWriter) Write(p []byte) (int, error) {
	if w.timeout > 0 {
		w.nc.SetWriteDeadline(time.Now().Add(w.timeout))
	}
	return w.nc.Write(p)
}

// reserve takes a place for a new stream, if the connection can take one.
func (c *conn) reserve() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.goAway || uint32(len(c.streams)+c.reserved) >= c.maxStreams || c.nextID > maxStreamID {
		return false
	}
	c.reserved++
	if c.idle != nil {
		c.idle.Stop()
	}
	return true
}

// usable reports whether the connection may still take streams.
func (c *conn) usable() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.closed && !c.goAway
}

// takesNoStreams reports whether the server's settings allow no stream.
func (c *conn) takesNoStreams() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxStreams == 0
}

// settingsTimeout bounds the wait for the server's first SETTINGS.
const settingsTimeout = 10 * time.Second

// maxStreamID is the last id a client can use; a connection that reaches
// it takes no new streams.
const maxStreamID = 1<<31 - 1

// flushLoop writes out what the connection's writers buffered, whenever
// they leave something and it finds nothing more being queued: writers
// kick it after each frame, and it runs once they stop to wait.
func (c *conn) flushLoop() {
	for {
		select {
		case <-c.kick:
		case <-c.done:
			return
		}
		c.wmu.Lock()
		var err error
		if c.werr == nil && c.bw.Buffered() > 0 {
			if err = c.bw.Flush(); err != nil {
				c.werr = err
			}
		}
		c.wmu.Unlock()
		if err != nil {
			c.close(fmt.Errorf("h2transport: write: %w", err))
			return
		}
	}
}

// write runs fn (which writes frames) under the write lock and has the
// result flushed. It returns the connection's write error, if any.
func (c *conn) write(fn func() error) error {
	c.wmu.Lock()
	err := c.werr
	if err == nil {
		if err = fn(); err != nil {
			c.werr = err
		}
	}
	c.wmu.Unlock()
	if err != nil {
		c.close(fmt.Errorf("h2transport: write: %w", err))
		return err
	}
	select {
	case c.kick <- struct{}{}:
	default:
	}
	return nil
}

// writeHeaderBlock writes block as HEADERS and CONTINUATION frames of at
// most the peer's frame size. Under wmu.
func (c *conn) writeHeaderBlock(id uint32, block []byte, endStream bool, maxFrame int) error {
	first := true
	for first || len(block) > 0 {
		chunk := block
		if len(chunk) > maxFrame {
			chunk = chunk[:maxFrame]
		}
		block = block[len(chunk):]
		var err error
		if first {
			err = c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: chunk, EndStream: endStream, EndHeaders: len(block) == 0})
		} else {
			err = c.fr.WriteContinuation(id, len(block) == 0, chunk)
		}
		if err != nil {
			return err
		}
		first = false
	}
	return nil
}

// close ends the connection and every stream on it with err.
func (c *conn) close(err error) { c.closeWhen(err, func() bool { return true }) }

// closeIfIdle closes the connection when it carries no stream, in one
// critical section with the check (a stream reserved meanwhile would
// otherwise be failed as if the server had taken it).
func (c *conn) closeIfIdle() {
	c.closeWhen(errIdleClosed, func() bool { return len(c.streams) == 0 && c.reserved == 0 })
}

func (c *conn) closeWhen(err error, cond func() bool) {
	c.mu.Lock()
	if c.closed || !cond() {
		c.mu.Unlock()
		return
	}
	c.closed, c.err = true, err
	streams := make([]*stream, 0, len(c.streams))
	for _, s := range c.streams {
		streams = append(streams, s)
	}
	clear(c.streams)
	if c.idle != nil {
		c.idle.Stop()
	}
	c.cond.Broadcast()
	c.mu.Unlock()
	c.t.forget(c)
	c.nc.Close()
	close(c.done)
	for _, s := range streams {
		s.fail(err, false)
	}
}

var (
	errIdleClosed    = errors.New("h2transport: connection closed while idle")
	errGoAway        = errors.New("h2transport: the server stopped taking streams (GOAWAY) before this one")
	errRefused       = errors.New("h2transport: the server refused the stream unprocessed (REFUSED_STREAM)")
	errConnExhausted = errors.New("h2transport: connection out of stream ids")
)

// streamEnded removes s from the connection; the connection goes idle
// (and closes after IdleConnTimeout) when it was the last.
func (c *conn) streamEnded(s *stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.streams[s.id] != s {
		return
	}
	delete(c.streams, s.id)
	c.cond.Broadcast()
	c.idleCheckLocked()
}

// idleCheckLocked closes a connection that carries nothing and takes no
// new streams, and arms the idle timer of one that does take them. Under
// c.mu.
func (c *conn) idleCheckLocked() {
	if len(c.streams) > 0 || c.reserved > 0 || c.closed {
		return
	}
	if c.goAway || c.nextID > maxStreamID {
		go c.close(errGoAway)
		return
	}
	if d := c.t.IdleConnTimeout; d > 0 {
		if c.idle == nil {
			c.idle = time.AfterFunc(d, c.closeIfIdle)
		} else {
			c.idle.Reset(d)
		}
	}
}

// readLoop reads frames until the connection ends.
func (c *conn) readLoop() {
	var err error
	for err == nil {
		var f http2.Frame
		f, err = c.fr.ReadFrame()
		var se http2.StreamError
		switch {
		case errors.As(err, &se):
			// A bad header block on one stream: reset it, go on.
			c.resetStream(se.StreamID, se.Code, fmt.Errorf("h2transport: %w", se))
			err = nil
		case err == nil:
			err = c.handle(f)
		}
	}
	var ce http2.ConnectionError
	if errors.As(err, &ce) {
		// Tell the server why, before closing.
		c.write(func() error { return c.fr.WriteGoAway(0, http2.ErrCode(ce), nil) })
		c.wmu.Lock()
		c.nc.SetWriteDeadline(time.Now().Add(time.Second)) // a courtesy: never wait long for it
		c.bw.Flush()
		c.wmu.Unlock()
	}
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	c.close(fmt.Errorf("h2transport: connection to %s: %w", c.addr, err))
}

func (c *conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		if s := c.stream(f.StreamID); s != nil {
			return s.onHeaders(f)
		}
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.RSTStreamFrame:
		if s := c.stream(f.StreamID); s != nil {
			err := error(http2.StreamError{StreamID: f.StreamID, Code: f.ErrCode})
			s.fail(fmt.Errorf("h2transport: %w", err), f.ErrCode == http2.ErrCodeRefusedStream)
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if err := c.onSettings(f); err != nil {
			return err
		}
		return c.write(c.fr.WriteSettingsAck)
	case *http2.PingFrame:
		if !f.IsAck() {
			return c.write(func() error { return c.fr.WritePing(true, f.Data) })
		}
	case *http2.GoAwayFrame:
		c.onGoAway(f.LastStreamID)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.PushPromiseFrame:
		return http2.ConnectionError(http2.ErrCodeProtocol) // push is off (SETTINGS_ENABLE_PUSH 0)
	}
	return nil
}

func (c *conn) stream(id uint32) *stream {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

func (c *conn) onSettings(f *http2.SettingsFrame) error {
	var tableSize *uint32
	c.mu.Lock()
	err := f.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			c.maxStreams = s.Val
		case http2.SettingMaxFrameSize:
			c.maxFrame = s.Val
		case http2.SettingInitialWindowSize:
			// Every open stream's window moves by the change (§6.9.2).
			delta := int64(s.Val) - int64(c.initSend)
			for _, st := range c.streams {
				st.sendWindow += delta
				if st.sendWindow > maxWindow {
					return http2.ConnectionError(http2.ErrCodeFlowControl)
				}
			}
			c.initSend = int32(s.Val)
			c.cond.Broadcast()
		case http2.SettingHeaderTableSize:
			tableSize = &s.Val
		}
		return nil
	})
	c.mu.Unlock()
	if err == nil && tableSize != nil {
		// The write lock is never taken under mu (the write side takes mu
		// under it).
		c.wmu.Lock()
		c.henc.SetMaxDynamicTableSizeLimit(*tableSize)
		c.wmu.Unlock()
	}
	return err
}

// maxWindow is the largest flow-control window the protocol allows.
const maxWindow = 1<<31 - 1

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f.StreamID == 0 {
		c.sendWindow += int64(f.Increment)
		if c.sendWindow > maxWindow {
			return http2.ConnectionError(http2.ErrCodeFlowControl)
		}
	} else if s := c.streams[f.StreamID]; s != nil {
		s.sendWindow += int64(f.Increment)
		if s.sendWindow > maxWindow {
			c.mu.Unlock()
			c.resetStream(s.id, http2.ErrCodeFlowControl, errors.New("h2transport: the server's window update overflowed the stream's window"))
			c.mu.Lock()
			return nil
		}
	}
	c.cond.Broadcast()
	return nil
}

// onGoAway stops new streams; the streams the server will not process
// fail as unprocessed, to be sent again elsewhere.
func (c *conn) onGoAway(last uint32) {
	c.mu.Lock()
	c.goAway, c.lastStream = true, last
	var refused []*stream
	for id, s := range c.streams {
		if id > last && !s.answeredHeaders() {
			// (A stream the server already answered was processed,
			// whatever the GOAWAY says.)
			refused = append(refused, s)
		}
	}
	empty := len(c.streams) == len(refused) && c.reserved == 0
	c.mu.Unlock()
	c.t.forget(c)
	for _, s := range refused {
		s.fail(errGoAway, true)
	}
	if empty {
		c.close(errGoAway)
	}
}

// onData hands a DATA frame's payload to its stream, within the windows.
func (c *conn) onData(f *http2.DataFrame) error {
	n := int32(f.Length)
	c.mu.Lock()
	if n > c.recvWindow {
		c.mu.Unlock()
		return http2.ConnectionError(http2.ErrCodeFlowControl)
	}
	c.recvWindow -= n
	s := c.streams[f.StreamID]
	c.mu.Unlock()
	// The connection's window is given back on receipt: each stream's
	// own window bounds what it holds unread, so one slow reader cannot
	// stop the connection's other streams.
	c.giveBack(n)
	if s != nil {
		s.onData(f.Data(), n, f.StreamEnded())
	}
	return nil
}

// giveBack returns n bytes to the connection's window, with a
// WINDOW_UPDATE once half the window is owed.
func (c *conn) giveBack(n int32) {
	c.mu.Lock()
	c.recvUnack += n
	inc := c.recvUnack
	if inc < connWindow/2 {
		c.mu.Unlock()
		return
	}
	c.recvUnack = 0
	c.recvWindow += inc
	c.mu.Unlock()
	c.write(func() error { return c.fr.WriteWindowUpdate(0, uint32(inc)) })
}

// resetStream sends RST_STREAM for id and ends its stream with err.
func (c *conn) resetStream(id uint32, code http2.ErrCode, err error) {
	c.write(func() error { return c.fr.WriteRSTStream(id, code) })
	if s := c.stream(id); s != nil {
		s.fail(err, false)
	}
}
