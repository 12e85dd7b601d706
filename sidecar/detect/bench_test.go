package detect

import (
	"testing"
	"time"
)

func benchDetect(b *testing.B, in string) {
	d := New(time.Second)
	data := []byte(in)
	buf := make([]byte, 64<<10)
	c := &chunkConn{}
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		c.data, c.chunk = data, len(data)
		_, conn, err := d.Detect(c)
		if err != nil {
			b.Fatal(err)
		}
		for {
			if _, err := conn.Read(buf); err != nil {
				break
			}
		}
	}
}

func BenchmarkDetectHTTP1(b *testing.B) {
	benchDetect(b, "GET /api/v1/items?limit=10 HTTP/1.1\r\nHost: svc.ns.svc.cluster.local\r\nUser-Agent: bench\r\n\r\n")
}
func BenchmarkDetectHTTP2(b *testing.B) {
	benchDetect(b, Preface+"\x00\x00\x00\x04\x00\x00\x00\x00\x00")
}
func BenchmarkDetectOpaqueTLS(b *testing.B) {
	benchDetect(b, "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
}
func BenchmarkParseRequestLine(b *testing.B) {
	in := []byte("GET /api/v1/items?limit=10 HTTP/1.1\r\nHost: x\r\n\r\n")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ParseRequestLine(in); err != nil {
			b.Fatal(err)
		}
	}
}
