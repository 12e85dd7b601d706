package forward

import (
	"io"
	"testing"
	"time"
)

// BenchmarkJoinCopy measures the steady-state copy path: one joined pair
// over loopback TCP, each op moves 32 KiB client→server.
func BenchmarkJoinCopy(b *testing.B) {
	jd := setup(b, New(time.Minute))
	defer jd.client.Close()
	defer jd.server.Close()
	const chunk = 32 << 10
	buf := make([]byte, chunk)
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, jd.server)
		close(done)
	}()
	b.SetBytes(chunk)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := jd.client.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	jd.client.CloseWrite()
	<-done
}

// BenchmarkJoinPair measures one short connection's life through Join:
// a 1 KiB request, a 1 KiB response, both half-closed.
func BenchmarkJoinPair(b *testing.B) {
	j := New(time.Minute)
	msg := make([]byte, 1024)
	got := make([]byte, 1024)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		jd := setup(b, j)
		b.StartTimer()
		jd.client.Write(msg)
		jd.client.CloseWrite()
		io.ReadFull(jd.server, got)
		jd.server.Write(msg)
		jd.server.CloseWrite()
		io.ReadFull(jd.client, got)
		jd.wait(b)
		b.StopTimer()
		jd.client.Close()
		jd.server.Close()
		b.StartTimer()
	}
}
