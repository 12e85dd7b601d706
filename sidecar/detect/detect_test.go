package detect

import (
	"bytes"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		in   string
		want Protocol
		done bool
	}{
		{"", Opaque, false},
		{"P", Opaque, false},
		{"PRI * HTTP/2.0\r\n\r\nSM\r\n", Opaque, false},
		{Preface, HTTP2, true},
		{Preface + "\x00\x00\x12\x04", HTTP2, true},
		{"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n", Opaque, true},
		{"GET / HTTP/1.1\r\n", HTTP1, true},
		{"GET / HTTP/1.1\r\nHost: a\r\n\r\n", HTTP1, true},
		{"GET / HTTP/1.0\n", HTTP1, true},
		{"POST /a?b=c HTTP/1.1\r\n", HTTP1, true},
		{"OPTIONS * HTTP/1.1\r\n", HTTP1, true},
		{"CONNECT example.com:443 HTTP/1.1\r\n", HTTP1, true},
		{"M-SEARCH * HTTP/1.1\r\n", HTTP1, true},
		{"GET / HTTP/1.1", Opaque, false},
		{"GET / HTTP/1.1\r", Opaque, false},
		{"GET / HTTP/1.", Opaque, false},
		{"GET /", Opaque, false},
		{"GET", Opaque, false},
		{"GET / HTTP/2.0\r\n", Opaque, true},
		{"GET / HTTP/1.1\rX", Opaque, true},
		{"GET  / HTTP/1.1\r\n", Opaque, true},
		{"GET / HTTP/1.1 \r\n", Opaque, true},
		{"GET /\x00 HTTP/1.1\r\n", Opaque, true},
		{"GET / HTTX/1.1\r\n", Opaque, true},
		{" GET / HTTP/1.1\r\n", Opaque, true},
		{"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", Opaque, true}, // TLS ClientHello
		{"SSH-2.0-OpenSSH_9.6\r\n", Opaque, true},
		{"\x00\x00\x00\x08\x04\xd2\x16\x2f", Opaque, true}, // postgres SSLRequest
		{"*1\r\n$4\r\nPING\r\n", Opaque, true},             // redis
		{strings.Repeat("A", maxMethod+1), Opaque, true},
		{strings.Repeat("A", maxMethod) + " / HTTP/1.1\r\n", HTTP1, true},
		{"GET /" + strings.Repeat("a", MaxPeek), Opaque, true},
	}
	for _, tc := range cases {
		got, done := Classify([]byte(tc.in))
		if got != tc.want || done != tc.done {
			t.Errorf("Classify(%.40q) = %v,%v; want %v,%v", tc.in, got, done, tc.want, tc.done)
		}
	}
}

func TestParseRequestLine(t *testing.T) {
	in := []byte("PUT /x/y?z HTTP/1.0\r\nHost: h\r\n\r\n")
	rl, n, err := ParseRequestLine(in)
	if err != nil {
		t.Fatal(err)
	}
	if string(rl.Method) != "PUT" || string(rl.Target) != "/x/y?z" || rl.Minor != '0' || n != len("PUT /x/y?z HTTP/1.0\r\n") {
		t.Errorf("got %q %q %c n=%d", rl.Method, rl.Target, rl.Minor, n)
	}
}

// pipe returns both ends of a loopback TCP connection.
func pipe(t testing.TB) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err = ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestDetectReplaysAcrossSplitWrites(t *testing.T) {
	cases := []struct {
		chunks []string
		want   Protocol
	}{
		{[]string{"GE", "T / HT", "TP/1.1\r", "\nHost: x\r\n\r\n"}, HTTP1},
		{[]string{"PRI * HTTP/2", ".0\r\n\r\nSM\r\n\r\n", "\x00\x00\x00\x04\x00\x00\x00\x00\x00"}, HTTP2},
		{[]string{"\x16\x03\x01hello"}, Opaque},
	}
	for _, tc := range cases {
		client, server := pipe(t)
		all := strings.Join(tc.chunks, "")
		go func() {
			for _, c := range tc.chunks {
				client.Write([]byte(c))
				// Sleep: the chunks must reach Detect in separate reads, on purpose; nothing tells when it read one.
				time.Sleep(5 * time.Millisecond)
			}
			client.(*net.TCPConn).CloseWrite()
		}()
		p, conn, err := New(2 * time.Second).Detect(server)
		if err != nil {
			t.Fatal(err)
		}
		if p != tc.want {
			t.Errorf("%q: got %v, want %v", all, p, tc.want)
		}
		got, err := io.ReadAll(conn)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != all {
			t.Errorf("replayed %q, want %q", got, all)
		}
	}
}

func TestDetectServerSpeaksFirstTimesOut(t *testing.T) {
	client, server := pipe(t)
	start := time.Now()
	p, conn, err := New(100 * time.Millisecond).Detect(server)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 100*time.Millisecond || el > 2*time.Second {
		t.Errorf("detection took %s, want about the 100ms timeout", el)
	}
	if p != Opaque || len(conn.Peeked()) != 0 {
		t.Errorf("got %v with %d peeked bytes, want opaque with none", p, len(conn.Peeked()))
	}
	// The deadline must be cleared: a later read waits past the timeout.
	// Sleep: the write comes after the old 100ms deadline would have passed, on purpose.
	go func() { time.Sleep(300 * time.Millisecond); client.Write([]byte("late")) }()
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "late" {
		t.Fatalf("read after detection = %q, %v", buf, err)
	}
}

func TestDetectPartialThenSilentIsOpaqueWithBytes(t *testing.T) {
	client, server := pipe(t)
	client.Write([]byte("GET / HT"))
	p, conn, err := New(100 * time.Millisecond).Detect(server)
	if err != nil {
		t.Fatal(err)
	}
	if p != Opaque || string(conn.Peeked()) != "GET / HT" {
		t.Errorf("got %v %q", p, conn.Peeked())
	}
}

func TestDetectBoundedOnEndlessGarbage(t *testing.T) {
	client, server := pipe(t)
	go func() {
		// A request line that never ends: detection must stop at MaxPeek.
		client.Write([]byte("GET /"))
		chunk := bytes.Repeat([]byte("a"), 1024)
		for i := 0; i < 64; i++ {
			if _, err := client.Write(chunk); err != nil {
				return
			}
		}
	}()
	p, conn, err := New(5 * time.Second).Detect(server)
	if err != nil {
		t.Fatal(err)
	}
	if p != Opaque || len(conn.Peeked()) != MaxPeek {
		t.Errorf("got %v with %d bytes, want opaque with %d", p, len(conn.Peeked()), MaxPeek)
	}
}

func TestDetectEOF(t *testing.T) {
	client, server := pipe(t)
	client.(*net.TCPConn).CloseWrite()
	p, conn, err := New(time.Second).Detect(server)
	if err != nil || p != Opaque {
		t.Fatalf("got %v, %v", p, err)
	}
	if n, err := conn.Read(make([]byte, 1)); n != 0 || !errors.Is(err, io.EOF) {
		t.Errorf("read = %d, %v; want EOF", n, err)
	}
}

func TestDetectReadError(t *testing.T) {
	_, server := pipe(t)
	server.Close()
	if _, _, err := New(time.Second).Detect(server); err == nil {
		t.Fatal("want an error from a closed conn")
	}
}
