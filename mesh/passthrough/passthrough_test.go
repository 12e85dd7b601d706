package passthrough

import (
	"bytes"
	"context"
	"encoding/hex"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// accept runs Accept on the server side of a pipe fed b, and returns what
// it found and everything the connection yields after the header.
func accept(t testing.TB, b []byte) (src, dst netip.AddrPort, rest []byte, err error) {
	h, rest, err := acceptHeader(t, b)
	return h.Src, h.Dst, rest, err
}

// acceptHeader is accept returning the whole header.
func acceptHeader(t testing.TB, b []byte) (Header, []byte, error) {
	client, server := net.Pipe()
	go func() {
		_, _ = client.Write(b)
		client.Close()
	}()
	defer server.Close()
	h, err := Accept(server, time.Second)
	if err != nil {
		return Header{}, nil, err
	}
	rest, _ := io.ReadAll(server)
	return h, rest, nil
}

// TestHeaderRoundTrip: what WriteHeader writes, Accept reads back (IPv4,
// IPv6, an unknown source), and the bytes after it (a ClientHello) are
// the connection's, unchanged.
func TestHeaderRoundTrip(t *testing.T) {
	hello := []byte{0x16, 0x03, 0x01, 0x00, 0x02, 0xaa, 0xbb}
	for _, c := range []struct{ src, dst, wantSrc string }{
		{"10.244.0.7:41000", "10.245.0.5:8080", "10.244.0.7:41000"},
		{"[fd00::7]:41000", "[fd00:1::5]:8080", "[fd00::7]:41000"},
		{"", "10.245.0.5:8080", "0.0.0.0:0"},
		{"[fd00::7]:41000", "10.245.0.5:8080", "0.0.0.0:0"}, // families differ
	} {
		var src netip.AddrPort
		if c.src != "" {
			src = netip.MustParseAddrPort(c.src)
		}
		var buf bytes.Buffer
		if err := WriteHeader(&buf, src, netip.MustParseAddrPort(c.dst)); err != nil {
			t.Fatal(err)
		}
		gotSrc, gotDst, rest, err := accept(t, append(buf.Bytes(), hello...))
		if err != nil {
			t.Fatalf("%s → %s: %v", c.src, c.dst, err)
		}
		if gotSrc.String() != c.wantSrc || gotDst.String() != c.dst || !bytes.Equal(rest, hello) {
			t.Errorf("%s → %s: read %v → %v, rest %x", c.src, c.dst, gotSrc, gotDst, rest)
		}
	}
}

// TestHeaderAsTheSpecWritesIt: Accept reads a header built by hand from
// the PROXY protocol specification (section 2.2), not by the writer.
func TestHeaderAsTheSpecWritesIt(t *testing.T) {
	b, _ := hex.DecodeString("0d0a0d0a000d0a515549540a" + // signature
		"21" + "11" + "000c" + // v2 PROXY, TCP over IPv4, 12 bytes
		"0af40007" + "0af50005" + "a028" + "1f90") // 10.244.0.7 → 10.245.0.5, 41000 → 8080
	src, dst, rest, err := accept(t, append(b, 'x'))
	if err != nil || src.String() != "10.244.0.7:41000" || dst.String() != "10.245.0.5:8080" || string(rest) != "x" {
		t.Fatalf("%v → %v, rest %q, %v", src, dst, rest, err)
	}
	// The same with a TLV after the addresses (a NOOP of 3 bytes, 2.2.7):
	// read with the header, none of it left to the connection.
	b, _ = hex.DecodeString("0d0a0d0a000d0a515549540a" + "21" + "11" + "0012" +
		"0af40007" + "0af50005" + "a028" + "1f90" + "04" + "0003" + "000000")
	src, dst, rest, err = accept(t, append(b, 'x'))
	if err != nil || src.String() != "10.244.0.7:41000" || dst.String() != "10.245.0.5:8080" || string(rest) != "x" {
		t.Fatalf("with a TLV: %v → %v, rest %q, %v", src, dst, rest, err)
	}
}

// TestRefusedHeaders: each is refused with ErrHeader.
func TestRefusedHeaders(t *testing.T) {
	for name, hexHeader := range map[string]string{
		"PROXY v1":          hex.EncodeToString([]byte("PROXY TCP4 10.244.0.7 10.245.0.5 41000 8080\r\n")),
		"LOCAL command, v1": hex.EncodeToString([]byte("PROXY UNKNOWN\r\n")),
		"UDP":               "0d0a0d0a000d0a515549540a" + "21" + "12" + "000c" + "0af40007" + "0af50005" + "a0281f90",
		"port 0":            "0d0a0d0a000d0a515549540a" + "21" + "11" + "000c" + "0af40007" + "0af50005" + "a0280000",
		"unspecified":       "0d0a0d0a000d0a515549540a" + "21" + "11" + "000c" + "0af40007" + "00000000" + "a0281f90",
		"truncated":         "0d0a0d0a000d0a515549540a" + "21" + "11" + "000c" + "0af4",
		"a TLS ClientHello": "160301000501020304",
		// 513 bytes announced: more than a header of Plexus's can be.
		"too long": "0d0a0d0a000d0a515549540a" + "21" + "11" + "0201" + strings.Repeat("00", 513),
		// AF_UNIX stream addresses (2.2: 216 bytes): not TCP.
		"AF_UNIX": "0d0a0d0a000d0a515549540a" + "21" + "31" + "00d8" + strings.Repeat("61", 216),
		"nothing": "",
	} {
		b, _ := hex.DecodeString(hexHeader)
		if _, _, _, err := accept(t, b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// FuzzAccept: no input panics Accept, and whatever it accepts is a health
// check without addresses or names a usable destination, and leaves the
// rest of the bytes, unread, to the connection.
func FuzzAccept(f *testing.F) {
	var ok bytes.Buffer
	_ = WriteHeader(&ok, netip.MustParseAddrPort("10.244.0.7:41000"), netip.MustParseAddrPort("10.245.0.5:8080"))
	f.Add(ok.Bytes())
	f.Add([]byte("PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n"))
	f.Add([]byte{0x16, 0x03, 0x01})
	local, _ := hex.DecodeString("0d0a0d0a000d0a515549540a" + "20" + "00" + "0000") // a health check (LOCAL)
	f.Add(local)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, rest, err := acceptHeader(t, b)
		if err != nil {
			return
		}
		if !bytes.HasSuffix(b, rest) {
			t.Fatalf("rest %x is not the input's tail", rest)
		}
		if h.Health {
			if h.Src.IsValid() || h.Dst.IsValid() {
				t.Fatalf("a health check with addresses %+v", h)
			}
			return
		}
		if dst := h.Dst; !dst.IsValid() || dst.Port() == 0 || dst.Addr().IsUnspecified() {
			t.Fatalf("accepted destination %v", dst)
		}
	})
}

// TestHealthCheck: Probe's LOCAL header is read as a health check, and
// Probe passes on a clean close and fails on a reset or silence.
func TestHealthCheck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	answer := make(chan string, 3)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			h, err := Accept(c, time.Second)
			switch how := <-answer; {
			case err != nil || !h.Health:
				t.Errorf("read %+v, %v: want a health check", h, err)
				c.Close()
			case how == "close":
				c.Close()
			case how == "reset":
				c.(*net.TCPConn).SetLinger(0)
				c.Close()
			case how == "silent":
				defer c.Close()
			}
		}
	}()
	gw := ln.Addr().(*net.TCPAddr).AddrPort()
	dial := func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", a.String())
	}
	for _, c := range []struct {
		how  string
		pass bool
	}{{"close", true}, {"reset", false}, {"silent", false}} {
		answer <- c.how
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := Probe(ctx, dial, gw)
		cancel()
		if (err == nil) != c.pass {
			t.Errorf("gateway that answers %s: Probe %v, want pass %v", c.how, err, c.pass)
		}
	}
}
