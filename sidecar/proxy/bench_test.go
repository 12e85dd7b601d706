package proxy

import (
	"io"
	"net/http"
	"testing"
)

// benchUpstream serves a fixed 1 KiB body over HTTP/1.1 and h2c.
func benchUpstream(b *testing.B) string {
	body := make([]byte, 1024)
	srv := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write(body)
	})}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	return serveLoopback(b, srv)
}

func benchGet(b *testing.B, c *http.Client, url string) {
	b.ReportAllocs()
	for b.Loop() {
		res, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
	}
}

// BenchmarkHTTP1Direct is the baseline: keep-alive GETs straight to the upstream.
func BenchmarkHTTP1Direct(b *testing.B) {
	addr := benchUpstream(b)
	benchGet(b, &http.Client{}, "http://"+addr+"/")
}

// BenchmarkHTTP1Proxied is the same through one proxy (client and proxy
// allocations both counted: they share the process).
func BenchmarkHTTP1Proxied(b *testing.B) {
	addr := benchUpstream(b)
	h := startBench(b)
	h.to(addr)
	benchGet(b, h.client(false), "http://svc.example/")
}

func BenchmarkH2CProxied(b *testing.B) {
	addr := benchUpstream(b)
	h := startBench(b)
	h.to(addr)
	benchGet(b, h.client(true), "http://svc.example/")
}

func BenchmarkH2CDirect(b *testing.B) {
	addr := benchUpstream(b)
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	benchGet(b, &http.Client{Transport: tr}, "http://"+addr+"/")
}
