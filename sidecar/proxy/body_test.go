package proxy

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"
)

// TestLargeBodiesBothWays streams 8 MiB up (chunked / h2 DATA of unknown
// length) and 8 MiB down through the proxy and compares checksums.
func TestLargeBodiesBothWays(t *testing.T) {
	const size = 8 << 20
	payload := make([]byte, size)
	rand.NewChaCha8([32]byte{1}).Read(payload)
	sum := sha256.Sum256(payload)
	srv := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.Copy(h, r.Body)
		w.Header().Set("X-Got-Sum", hex.EncodeToString(h.Sum(nil)))
		if n != size {
			w.WriteHeader(400)
			return
		}
		w.Write(payload)
	})}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	addr := serveLoopback(t, srv)
	h := start(t, nil)
	h.to(addr)
	for _, h2 := range []bool{false, true} {
		pr, pw := io.Pipe()
		go func() {
			// Unknown length: HTTP/1 chunked, HTTP/2 DATA frames.
			for off := 0; off < size; off += 100_000 {
				pw.Write(payload[off:min(off+100_000, size)])
			}
			pw.Close()
		}()
		req, _ := http.NewRequest("POST", "http://svc.example/upload", pr)
		res, err := h.client(h2).Do(req)
		if err != nil {
			t.Fatalf("h2=%v: %v", h2, err)
		}
		got := sha256.New()
		n, err := io.Copy(got, res.Body)
		res.Body.Close()
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("h2=%v: status %d, %v", h2, res.StatusCode, err)
		}
		if res.Header.Get("X-Got-Sum") != hex.EncodeToString(sum[:]) {
			t.Errorf("h2=%v: upload corrupted", h2)
		}
		if n != size || [32]byte(got.Sum(nil)) != sum {
			t.Errorf("h2=%v: download corrupted (%d bytes)", h2, n)
		}
	}
}
