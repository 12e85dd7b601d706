package h2transport

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/plexus-mesh/plexus/testsupport/tcptest"
)

// A scripted server: ops decoded from fuzz bytes become the frames it
// answers stream 1 with. The same script is played to this package's
// client and to net/http's HTTP/2 client (x/net/http2's reader under it),
// and what each makes of it must agree: both fail, or both return the
// same status, headers, body and trailers.

// script turns fuzz bytes into server frames for stream 1.
func script(ops []byte) func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
	return func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
		b := ops // each playing reads the ops from the start
		// net/http takes any number as a status ("2000"); this client
		// refuses what is not three digits (RFC 9110 §15), which
		// TestMalformedStatus holds it to, so the script sends none.
		statuses := []string{"200", "204", "103", "100", "404", "abc", "500", "304"}
		names := []string{"content-type", "content-length", "grpc-status", "x-a", "X-Upper", "trailer", ":status", "connection", "x-b", ""}
		values := []string{"1", "0", "5", "text/plain", "x-b", "a\x00b", " padded ", "9999999999999999999999", ""}
		block := func(fields [][2]string) []byte {
			hb.Reset()
			for _, f := range fields {
				enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
			}
			return hb.Bytes()
		}
		next := func() byte {
			if len(b) == 0 {
				return 0
			}
			c := b[0]
			b = b[1:]
			return c
		}
		for len(b) > 0 {
			op := next()
			end := op&0x80 != 0
			switch op & 0x7 {
			case 0, 1: // headers: a status and up to three fields
				fields := [][2]string{{":status", statuses[int(next())%len(statuses)]}}
				if op&0x8 != 0 {
					fields = fields[1:] // no :status: trailers, or malformed
				}
				for range int(next() % 4) {
					fields = append(fields, [2]string{names[int(next())%len(names)], values[int(next())%len(values)]})
				}
				fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block(fields), EndStream: end, EndHeaders: true})
			case 2, 3: // data
				n := int(next()) % 64
				fr.WriteData(1, end, bytes.Repeat([]byte{'d'}, n))
			case 4:
				// RST_STREAM and GOAWAY end the script: this client ignores
				// what follows them (RFC 9113 §6.4, §6.8), while net/http
				// takes a response that comes right after either if its
				// RoundTrip has not yet woken to the abort (a race it
				// keeps on purpose, golang.org/issue/49645).
				fr.WriteRSTStream(1, http2.ErrCode(next()%14))
				return
			case 5:
				fr.WriteWindowUpdate(uint32(next()%2), uint32(next())+1)
			case 6:
				fr.WriteGoAway(uint32(next()%3), http2.ErrCode(next()%14), nil)
				return
			case 7:
				fr.WritePing(false, [8]byte{next()})
			}
		}
	}
}

// playServer answers each connection's first request with the script,
// then ends the connection.
func playServer(t testing.TB, play func(*http2.Framer, *hpack.Encoder, *bytes.Buffer)) (string, func()) {
	addr, stop := tcptest.Serve(t, "127.0.0.1:0", func(c net.Conn) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(c)
		preface := make([]byte, len(http2.ClientPreface))
		if _, err := io.ReadFull(br, preface); err != nil {
			return
		}
		bw := bufio.NewWriter(c)
		fr := http2.NewFramer(bw, br)
		fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
		fr.WriteSettings()
		bw.Flush()
		for { // up to the request's HEADERS
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if _, ok := f.(*http2.MetaHeadersFrame); ok {
				break
			}
		}
		var hb bytes.Buffer
		play(fr, hpack.NewEncoder(&hb), &hb)
		bw.Flush()
		// The script is all there is: end it with FIN, so that neither
		// client waits, and read (acks, resets) until the client is done.
		c.(*net.TCPConn).CloseWrite()
		for {
			if _, err := fr.ReadFrame(); err != nil {
				return
			}
		}
	})
	return addr.String(), stop
}

// outcome is what a client made of a response.
type outcome struct {
	err     bool
	status  int
	header  string
	body    string
	trailer string
}

func fetch(rt http.RoundTripper, url string) outcome {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("User-Agent", "fuzz")
	res, err := rt.RoundTrip(req)
	if err != nil {
		return outcome{err: true}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return outcome{err: true}
	}
	return outcome{status: res.StatusCode, header: flat(res.Header), body: string(b), trailer: flat(res.Trailer)}
}

func flat(h http.Header) string {
	var lines []string
	for k, vv := range h {
		lines = append(lines, k+": "+strings.Join(vv, ","))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

func FuzzResponseFramesAgainstNetHTTP(f *testing.F) {
	for _, seed := range [][]byte{
		{0x80, 0},                         // 200, END_STREAM on headers
		{0, 0, 1, 3, 0, 0x82, 5},          // 200 with grpc-status, data with END_STREAM
		{0, 0, 0, 2, 7, 0x88, 1, 2, 0},    // headers, data, trailers
		{0, 2, 0, 0x80, 0, 0},             // 103 then 200
		{0, 0, 1, 1, 2, 0x82, 5},          // content-length 0 and 5 bytes
		{0, 0, 0, 4, 8},                   // headers then RST_STREAM CANCEL
		{0, 0, 0, 6, 0, 0},                // GOAWAY last stream 0 after headers
		{0x80, 4, 0},                      // a bad status
		{2, 5, 0x80, 0, 0},                // DATA before HEADERS
		{0, 0, 2, 6, 0, 6, 0, 0x82, 3},    // a :status among the fields
		{0x88, 0, 0},                      // headers with no status
		{0, 0, 1, 1, 1, 0x82, 1, 0x82, 1}, // data after END_STREAM
		{5, 1, 200, 0x80, 0, 0, 7, 1},     // window update, ping
	} {
		f.Add(seed)
	}
	ours := &Transport{Dial: (&net.Dialer{}).DialContext}
	ref := &http.Transport{Protocols: new(http.Protocols), DisableCompression: true}
	ref.Protocols.SetUnencryptedHTTP2(true)
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) > 64 {
			return
		}
		addr, stop := playServer(t, script(b))
		defer stop()
		got := fetch(ours, "http://"+addr+"/")
		want := fetch(ref, "http://"+addr+"/")
		ours.CloseIdleConnections()
		ref.CloseIdleConnections()
		if got != want {
			t.Errorf("script %x:\nh2transport: %+v\nnet/http:    %+v", b, got, want)
		}
	})
}
