package mtls

import (
	"bytes"
	"crypto/tls"
	"net"
	"testing"
)

// clientHello captures the first flight of a Go TLS client offering alpn.
func clientHello(tb testing.TB, alpn ...string) []byte {
	tb.Helper()
	a, b := net.Pipe()
	go func() {
		tls.Client(a, &tls.Config{InsecureSkipVerify: true, NextProtos: alpn}).Handshake()
	}()
	buf := make([]byte, MaxHello)
	var got []byte
	for {
		n, err := b.Read(buf)
		got = append(got, buf[:n]...)
		if _, decided := OffersALPN(got, ALPN); decided || err != nil {
			break
		}
	}
	a.Close()
	b.Close()
	return got
}

func TestOffersALPN(t *testing.T) {
	mesh := clientHello(t, "h2", ALPN)
	if ok, decided := OffersALPN(mesh, ALPN); !ok || !decided {
		t.Fatalf("mesh hello: offers=%v decided=%v", ok, decided)
	}
	// Every proper prefix is undecided: the peek never decides early.
	for i := 1; i < len(mesh); i++ {
		if _, decided := OffersALPN(mesh[:i], ALPN); decided {
			t.Fatalf("decided after %d of %d bytes", i, len(mesh))
		}
	}
	// The same hello split across two records still offers it.
	body := mesh[5:]
	split := append([]byte{0x16, 3, 1, 0, 10}, body[:10]...)
	split = append(split, 0x16, 3, 1, byte((len(body)-10)>>8), byte(len(body)-10))
	split = append(split, body[10:]...)
	if ok, decided := OffersALPN(split, ALPN); !ok || !decided {
		t.Errorf("fragmented hello: offers=%v decided=%v", ok, decided)
	}
	for name, b := range map[string][]byte{
		"h2 only":   clientHello(t, "h2"),
		"no alpn":   clientHello(t),
		"http":      []byte("GET / HTTP/1.1\r\n"),
		"h2c":       []byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
		"alert":     {0x15, 3, 3, 0, 2, 2, 40},
		"empty rec": {0x16, 3, 3, 0, 0},
	} {
		if ok, decided := OffersALPN(b, ALPN); ok || !decided {
			t.Errorf("%s: offers=%v decided=%v, want not offered, decided", name, ok, decided)
		}
	}
}

// FuzzOffersALPN (seeds: Go ClientHellos in testdata, captured once;
// generating them here stalls the fuzz workers): never panics, is decided at MaxHello bytes, and a
// decision never changes when more bytes follow.
func FuzzOffersALPN(f *testing.F) {
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Add([]byte{0x16, 3, 1, 0, 4, 1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		ok, decided := OffersALPN(b, ALPN)
		if len(b) >= MaxHello && !decided {
			t.Fatalf("undecided at %d bytes", len(b))
		}
		if decided {
			more := append(bytes.Clone(b), 0x16, 3, 3, 0, 1, 0)
			if ok2, d2 := OffersALPN(more, ALPN); !d2 || ok2 != ok {
				t.Fatalf("decision changed with more bytes: %v→%v (decided %v)", ok, ok2, d2)
			}
		}
	})
}
