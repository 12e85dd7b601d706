package detect

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// chunkConn serves data in reads of at most chunk bytes, then EOF.
type chunkConn struct {
	net.Conn
	data  []byte
	chunk int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(len(p), c.chunk, len(c.data))
	n = copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}
func (c *chunkConn) SetReadDeadline(time.Time) error { return nil }

func seeds(f *testing.F) {
	for _, s := range []string{"", Preface, "GET / HTTP/1.1\r\n\r\n", "PRI * HTTP/2.0\r\n", "GET / HTTP/1.1\n",
		"\x16\x03\x01\x00", "A B HTTP/1.9\r\n", "GET /\r\n"} {
		f.Add([]byte(s), uint8(3))
	}
}

func FuzzDetect(f *testing.F) {
	seeds(f)
	d := New(time.Second)
	f.Fuzz(func(t *testing.T, in []byte, chunk uint8) {
		c := &chunkConn{data: in, chunk: int(chunk%64) + 1}
		p, conn, err := d.Detect(c)
		if err != nil {
			t.Fatal(err)
		}
		peeked := conn.Peeked()
		if len(peeked) > MaxPeek || !bytes.HasPrefix(in, peeked) {
			t.Fatalf("peeked %d bytes not a bounded prefix of the input", len(peeked))
		}
		if want, done := Classify(peeked); done && want != p {
			t.Fatalf("Detect=%v but Classify(peeked)=%v", p, want)
		}
		if p == HTTP2 && !bytes.HasPrefix(in, []byte(Preface)) {
			t.Fatal("h2 without preface")
		}
		all, err := io.ReadAll(conn)
		if err != nil || !bytes.Equal(all, in) {
			t.Fatalf("replay mismatch: %v", err)
		}
	})
}

func FuzzParseRequestLine(f *testing.F) {
	seeds(f)
	f.Fuzz(func(t *testing.T, in []byte, _ uint8) {
		rl, n, err := ParseRequestLine(in)
		if err != nil {
			if n != 0 {
				t.Fatalf("error with n=%d", n)
			}
			if errors.Is(err, ErrShort) {
				// Every prefix of a valid-but-short input is short too.
				for k := range len(in) {
					if _, _, e := ParseRequestLine(in[:k]); !errors.Is(e, ErrShort) {
						t.Fatalf("prefix %d: %v, but the longer input is short", k, e)
					}
				}
			}
			return
		}
		if n > len(in) || n < len("A / HTTP/1.1\n") || in[n-1] != '\n' {
			t.Fatalf("bad length %d", n)
		}
		if len(rl.Method) == 0 || len(rl.Method) > maxMethod || len(rl.Target) == 0 || rl.Minor < '0' || rl.Minor > '9' {
			t.Fatalf("bad fields %+v", rl)
		}
		if bytes.ContainsAny(rl.Target, " \r\n\x00") {
			t.Fatalf("target %q has forbidden bytes", rl.Target)
		}
		// Stable: the line alone parses to the same length, every shorter prefix is short.
		if _, n2, err := ParseRequestLine(in[:n]); err != nil || n2 != n {
			t.Fatalf("reparse = %d, %v", n2, err)
		}
		for k := range n {
			if _, _, e := ParseRequestLine(in[:k]); !errors.Is(e, ErrShort) {
				t.Fatalf("prefix %d of a valid line: %v", k, e)
			}
		}
	})
}
