package h2transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"

	"golang.org/x/net/http2"
)

// stream is one request and its response.
type stream struct {
	c     *conn
	id    uint32
	req   *http.Request
	trace *httptrace.ClientTrace
	resc  chan result // the response headers or the error, once
	stop  func() bool // stops the request context's watch
	// dead is set once the stream failed or was reset: its request body
	// stops going out.
	dead atomic.Bool
	// body is who has the request body: bodyUntouched until the writer
	// starts reading it (bodyReading) or the stream is refused before
	// that (bodyLeft: a retry sends the same body, which this stream's
	// writer must then neither read nor close).
	body atomic.Int32

	// sendWindow is what the server lets this stream send; under c.mu.
	sendWindow int64

	mu         sync.Mutex
	cond       *sync.Cond // body bytes arrived, or the response ended
	answered   bool       // resc has its value
	res        *http.Response
	noBody     bool // HEAD: the response has no body whatever its length says
	noLength   bool // HEAD, 204, 304: content-length does not describe the body
	num1xx     int
	buf        []byte // response body received; buf[off:] is not read yet
	off        int
	bodyErr    error       // io.EOF at the end of the response, or why it broke
	trailer    http.Header // the trailers, copied into res.Trailer by the reader at the end
	got        int64       // response body bytes received
	recvWindow int32       // what the server may still send on this stream
	recvUnack  int32       // read and not yet given back
	readerGone bool        // the response body was closed
	respDone   bool        // the response side ended (END_STREAM, reset or failure)
	reqDone    bool        // the request side ended (END_STREAM sent, or abandoned)
}

const (
	bodyUntouched = iota
	bodyReading
	bodyLeft
)

// max1xx bounds the interim responses of one request, as net/http's
// client does.
const max1xx = 5

type result struct {
	res *http.Response
	err error
}

// roundTrip sends req on a new stream of c, which reserve admitted.
func (c *conn) roundTrip(req *http.Request) (*http.Response, error) {
	hasBody := req.Body != nil && req.Body != http.NoBody
	if err := checkRequest(req); err != nil {
		c.unreserve()
		closeBody(req)
		return nil, err
	}
	s := &stream{
		c: c, req: req, trace: httptrace.ContextClientTrace(req.Context()),
		resc: make(chan result, 1), recvWindow: streamWindow,
		noBody: req.Method == http.MethodHead, noLength: req.Method == http.MethodHead,
	}
	s.cond = sync.NewCond(&s.mu)
	var refused error
	err := c.write(func() error {
		c.mu.Lock()
		c.reserved--
		switch {
		case c.closed:
			refused = c.err
		case c.goAway:
			refused = errGoAway
		case c.nextID > maxStreamID:
			refused = errConnExhausted
		}
		if refused != nil {
			c.idleCheckLocked()
			c.mu.Unlock()
			return nil
		}
		s.id = c.nextID
		c.nextID += 2
		s.sendWindow = int64(c.initSend)
		c.streams[s.id] = s
		maxFrame := int(c.maxFrame)
		c.mu.Unlock()
		c.hbuf.Reset()
		encodeRequest(c.henc, req, hasBody)
		return c.writeHeaderBlock(s.id, c.hbuf.Bytes(), !hasBody, maxFrame)
	})
	if refused == nil && err != nil && s.id == 0 {
		// The connection broke before this stream was written.
		c.unreserve()
		refused = err
	}
	if refused != nil {
		return nil, &unprocessedError{err: refused}
	}
	if err != nil {
		closeBody(req)
		return nil, err
	}
	s.stop = context.AfterFunc(req.Context(), func() { s.reset(http2.ErrCodeCancel, req.Context().Err()) })
	if hasBody {
		go s.writeBody()
	} else {
		if s.trace != nil && s.trace.WroteRequest != nil {
			s.trace.WroteRequest(httptrace.WroteRequestInfo{})
		}
		s.requestDone()
	}
	r := <-s.resc
	return r.res, r.err
}

func (c *conn) unreserve() {
	c.mu.Lock()
	c.reserved--
	c.idleCheckLocked()
	c.mu.Unlock()
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// writeBody sends the request body as DATA frames within the send
// windows, then END_STREAM (with the trailers, if any).
func (s *stream) writeBody() {
	if !s.body.CompareAndSwap(bodyUntouched, bodyReading) {
		// Refused before it began: the retry has the body.
		s.requestDone()
		return
	}
	body := s.req.Body
	defer body.Close()
	bp := bodyBufs.Get().(*[16 << 10]byte)
	defer bodyBufs.Put(bp)
	var err error
	for err == nil {
		n, rerr := body.Read(bp[:])
		if n > 0 {
			err = s.sendData(bp[:n])
		}
		switch {
		case err != nil:
		case rerr == io.EOF:
			err = s.endRequest()
			if err == nil {
				err = io.EOF
			}
		case rerr != nil:
			err = fmt.Errorf("h2transport: reading the request body: %w", rerr)
			s.reset(http2.ErrCodeCancel, err)
		}
	}
	if err == io.EOF {
		err = nil
	}
	if s.trace != nil && s.trace.WroteRequest != nil {
		s.trace.WroteRequest(httptrace.WroteRequestInfo{Err: err})
	}
	s.requestDone()
}

var bodyBufs = sync.Pool{New: func() any { return new([16 << 10]byte) }}

var errStreamEnded = errors.New("h2transport: the stream ended before its request body was sent")

// sendData writes data as DATA frames, each within the connection's and
// the stream's send windows and the server's frame size.
func (s *stream) sendData(data []byte) error {
	c := s.c
	for len(data) > 0 {
		c.mu.Lock()
		var n int64
		for {
			if s.dead.Load() || c.closed {
				c.mu.Unlock()
				return errStreamEnded
			}
			n = min(c.sendWindow, s.sendWindow, int64(c.maxFrame), int64(len(data)))
			if n > 0 {
				break
			}
			c.cond.Wait()
		}
		c.sendWindow -= n
		s.sendWindow -= n
		c.mu.Unlock()
		chunk := data[:n]
		data = data[n:]
		if err := c.write(func() error {
			if s.dead.Load() {
				// Not sent: the connection's window gets it back.
				c.mu.Lock()
				c.sendWindow += int64(len(chunk))
				c.cond.Broadcast()
				c.mu.Unlock()
				return nil
			}
			return c.fr.WriteData(s.id, false, chunk)
		}); err != nil {
			return err
		}
	}
	return nil
}

// endRequest ends the request side: trailers, or an empty DATA frame,
// with END_STREAM.
func (s *stream) endRequest() error {
	c := s.c
	return c.write(func() error {
		if s.dead.Load() {
			return nil
		}
		if len(s.req.Trailer) == 0 {
			return c.fr.WriteData(s.id, true, nil)
		}
		c.mu.Lock()
		maxFrame := int(c.maxFrame)
		c.mu.Unlock()
		c.hbuf.Reset()
		encodeTrailers(c.henc, s.req.Trailer)
		return c.writeHeaderBlock(s.id, c.hbuf.Bytes(), true, maxFrame)
	})
}

// reset sends RST_STREAM with code, unless the stream already ended both
// ways, and fails it with err.
func (s *stream) reset(code http2.ErrCode, err error) {
	s.mu.Lock()
	finished := s.respDone && s.reqDone
	s.mu.Unlock()
	if finished {
		return
	}
	// The stream fails first: a writer stuck behind a peer that stopped
	// reading must not hold up the caller's cancellation.
	s.fail(err, false)
	s.c.write(func() error { return s.c.fr.WriteRSTStream(s.id, code) })
}

// fail ends the stream with err: RoundTrip returns it if the response
// headers have not come, and the response body's reads do otherwise.
// unprocessed: the server did not act on the request (it may be sent
// again).
func (s *stream) fail(err error, unprocessed bool) {
	s.dead.Store(true)
	s.mu.Lock()
	if s.respDone {
		s.mu.Unlock()
		s.wakeWriter()
		return
	}
	if unprocessed {
		// Either the body is left to the retry, or its writer has it.
		left := s.body.CompareAndSwap(bodyUntouched, bodyLeft) || s.body.Load() == bodyLeft
		err = &unprocessedError{err: err, bodyRead: !left}
	}
	s.bodyErr = err
	if !s.answered {
		s.answered = true
		s.resc <- result{err: err}
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	s.wakeWriter()
	s.responseDone()
}

// wakeWriter has a body writer waiting for window see that the stream
// ended.
func (s *stream) wakeWriter() {
	s.c.mu.Lock()
	s.c.cond.Broadcast()
	s.c.mu.Unlock()
}

// responseDone and requestDone each end one side; the stream leaves the
// connection when both have.
func (s *stream) responseDone() { s.sideDone(&s.respDone) }
func (s *stream) requestDone()  { s.sideDone(&s.reqDone) }

func (s *stream) sideDone(side *bool) {
	s.mu.Lock()
	*side = true
	both := s.respDone && s.reqDone
	s.mu.Unlock()
	if both {
		if s.stop != nil {
			s.stop()
		}
		s.c.streamEnded(s)
	}
}

// answeredHeaders reports whether the response headers came.
func (s *stream) answeredHeaders() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.res != nil
}

// onHeaders takes a HEADERS block: the response's headers (after any
// interim responses), or its trailers.
func (s *stream) onHeaders(f *http2.MetaHeadersFrame) error {
	s.mu.Lock()
	res := s.res
	s.mu.Unlock()
	if f.Truncated {
		s.c.resetStream(s.id, http2.ErrCodeProtocol, fmt.Errorf("h2transport: the server's header list is larger than %d bytes", s.c.t.maxHeaderBytes()))
		return nil
	}
	if res == nil {
		return s.onResponseHeaders(f)
	}
	if !f.StreamEnded() || len(f.PseudoFields()) > 0 {
		s.c.resetStream(s.id, http2.ErrCodeProtocol, errors.New("h2transport: the server sent headers after the response headers that are not trailers"))
		return nil
	}
	trailer := make(http.Header, len(f.RegularFields()))
	for _, hf := range f.RegularFields() {
		k := canonicalKey(hf.Name)
		trailer[k] = append(trailer[k], hf.Value)
	}
	s.end(trailer)
	return nil
}

func (s *stream) onResponseHeaders(f *http2.MetaHeadersFrame) error {
	res, err := response(f, s.req)
	if err != nil {
		s.c.resetStream(s.id, http2.ErrCodeProtocol, err)
		return nil
	}
	if res.StatusCode < 200 {
		if f.StreamEnded() || res.StatusCode == http.StatusSwitchingProtocols {
			s.c.resetStream(s.id, http2.ErrCodeProtocol, fmt.Errorf("h2transport: interim response %d ends the stream or switches protocols", res.StatusCode))
			return nil
		}
		if s.num1xx++; s.num1xx > max1xx {
			s.reset(http2.ErrCodeCancel, fmt.Errorf("h2transport: more than %d interim responses", max1xx))
			return nil
		}
		if s.trace != nil && s.trace.Got1xxResponse != nil {
			if err := s.trace.Got1xxResponse(res.StatusCode, mimeHeader(res.Header)); err != nil {
				s.reset(http2.ErrCodeCancel, err)
			}
		}
		return nil
	}
	ended := f.StreamEnded()
	if res.StatusCode == http.StatusNoContent || res.StatusCode == http.StatusNotModified {
		s.noLength = true // (a 304's length is the representation's)
	}
	switch {
	case ended && !s.noLength && res.ContentLength > 0:
		// The stream ended with the headers that promised a body.
		res.Body = missingBody{fmt.Errorf("h2transport: the response ended before its content-length of %d bytes: %w", res.ContentLength, io.ErrUnexpectedEOF)}
	case ended || s.noBody:
		if ended && res.ContentLength < 0 {
			res.ContentLength = 0
		}
		res.Body = http.NoBody
	default:
		res.Body = &body{s: s}
	}
	s.mu.Lock()
	if s.answered { // failed meanwhile
		s.mu.Unlock()
		return nil
	}
	s.res, s.answered = res, true
	s.resc <- result{res: res}
	s.mu.Unlock()
	if ended {
		s.end(nil)
	} else if s.noBody {
		// No body: what the server sends after the headers is nobody's
		// to read.
		s.mu.Lock()
		s.readerGone = true
		s.mu.Unlock()
	}
	return nil
}

// onData adds a DATA frame's payload to the response body; false: the
// stream takes no more (the caller gives the bytes back to the
// connection's window).
func (s *stream) onData(data []byte, length int32, end bool) {
	s.mu.Lock()
	var bad error
	code := http2.ErrCodeProtocol
	switch {
	case s.respDone:
		s.mu.Unlock()
		return
	case s.res == nil:
		bad = errors.New("h2transport: the server sent DATA before response headers")
	case length > s.recvWindow:
		bad, code = errors.New("h2transport: the server sent more than the stream's window"), http2.ErrCodeFlowControl
	case s.res.ContentLength >= 0 && !s.noLength && s.got+int64(len(data)) > s.res.ContentLength:
		bad = fmt.Errorf("h2transport: the server sent more body than its content-length %d", s.res.ContentLength)
	}
	if bad != nil {
		s.mu.Unlock()
		s.c.resetStream(s.id, code, bad)
		return
	}
	s.got += int64(len(data))
	s.recvWindow -= length
	// Padding, and bytes nobody will read, count as read at once.
	s.recvUnack += length - int32(len(data))
	if s.readerGone {
		s.recvUnack += int32(len(data))
	} else {
		if s.off > 0 { // keep only what is unread, so buf stays within the window
			n := copy(s.buf, s.buf[s.off:])
			s.buf, s.off = s.buf[:n], 0
		}
		s.buf = append(s.buf, data...)
		s.cond.Broadcast()
	}
	inc := s.windowUpdate()
	s.mu.Unlock()
	if inc > 0 {
		s.c.write(func() error { return s.c.fr.WriteWindowUpdate(s.id, uint32(inc)) })
	}
	if end {
		s.end(nil)
	}
}

// windowUpdate takes what the stream owes the server once it is half the
// window, for a WINDOW_UPDATE. Under s.mu.
func (s *stream) windowUpdate() int32 {
	if s.respDone || s.recvUnack < streamWindow/2 {
		return 0
	}
	inc := s.recvUnack
	s.recvUnack = 0
	s.recvWindow += inc
	return inc
}

// end ends the response side on END_STREAM, with its trailers.
func (s *stream) end(trailer http.Header) {
	s.mu.Lock()
	if s.respDone {
		s.mu.Unlock()
		return
	}
	if cl := s.res.ContentLength; cl >= 0 && s.got != cl && !s.noLength {
		s.mu.Unlock()
		s.c.resetStream(s.id, http2.ErrCodeProtocol, fmt.Errorf("h2transport: the response body ended after %d of its content-length %d bytes", s.got, cl))
		return
	}
	s.trailer = trailer
	s.bodyErr = io.EOF
	s.cond.Broadcast()
	s.mu.Unlock()
	s.responseDone()
}

// missingBody is the body of a response that ended before it.
type missingBody struct{ err error }

func (b missingBody) Read([]byte) (int, error) { return 0, b.err }
func (missingBody) Close() error               { return nil }

// body is a response body.
type body struct{ s *stream }

func (b *body) Read(p []byte) (int, error) {
	s := b.s
	s.mu.Lock()
	for s.off == len(s.buf) && s.bodyErr == nil && !s.readerGone {
		s.cond.Wait()
	}
	if s.readerGone {
		s.mu.Unlock()
		return 0, errBodyClosed
	}
	if s.off == len(s.buf) {
		err := s.bodyErr
		if err == io.EOF {
			s.takeTrailers()
		}
		s.mu.Unlock()
		return 0, err
	}
	n := copy(p, s.buf[s.off:])
	s.off += n
	if s.off == len(s.buf) {
		s.buf, s.off = s.buf[:0], 0 // the next frames reuse the space
	}
	var err error
	if len(s.buf) == 0 && s.bodyErr == io.EOF {
		err = io.EOF // the end with the last bytes: one read fewer
		s.takeTrailers()
	}
	s.recvUnack += int32(n)
	inc := s.windowUpdate()
	s.mu.Unlock()
	if inc > 0 {
		s.c.write(func() error { return s.c.fr.WriteWindowUpdate(s.id, uint32(inc)) })
	}
	return n, err
}

// takeTrailers copies the trailers into the response as its body ends,
// in the reader's goroutine: the response is the caller's once RoundTrip
// returned (net/http's rule: res.Trailer is complete once Read returned
// io.EOF). Under s.mu.
func (s *stream) takeTrailers() {
	if len(s.trailer) == 0 {
		return
	}
	if s.res.Trailer == nil {
		s.res.Trailer = make(http.Header, len(s.trailer))
	}
	for k, vv := range s.trailer {
		s.res.Trailer[k] = vv
	}
	s.trailer = nil
}

var errBodyClosed = errors.New("h2transport: read on a closed response body")

// Close gives back what was received and not read and, before the end of
// the response, resets the stream (CANCEL).
func (b *body) Close() error {
	s := b.s
	s.mu.Lock()
	if s.readerGone {
		s.mu.Unlock()
		return nil
	}
	s.readerGone = true
	s.buf, s.off = nil, 0
	ended := s.respDone
	s.cond.Broadcast()
	s.mu.Unlock()
	if !ended {
		s.reset(http2.ErrCodeCancel, errBodyClosed)
	}
	return nil
}
