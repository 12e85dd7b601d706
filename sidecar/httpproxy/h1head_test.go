package httpproxy

import (
	"strings"
	"testing"
)

func TestParseRequestFastOrHandOff(t *testing.T) {
	for _, tc := range []struct {
		name, head string
		plain      bool
	}{
		{"get", "GET /a HTTP/1.1\r\nHost: x\r\n\r\n", true},
		{"post with length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\n", true},
		{"chunked", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n", true},
		{"same length twice", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", true},
		{"connection close", "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", true},
		{"http/1.0", "GET / HTTP/1.0\r\nHost: x\r\n\r\n", false},
		{"absolute form", "GET http://x/ HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"asterisk", "OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n", false},
		{"no host", "GET / HTTP/1.1\r\n\r\n", false},
		{"two hosts", "GET / HTTP/1.1\r\nHost: x\r\nHost: y\r\n\r\n", false},
		{"upgrade", "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", false},
		{"expect", "POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 1\r\n\r\n", false},
		{"length and chunked", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n", false},
		{"two lengths", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n", false},
		{"signed length", "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +3\r\n\r\n", false},
		{"gzip coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", false},
		{"bare LF", "GET / HTTP/1.1\nHost: x\n\n", false},
		{"bare LF in a field", "GET / HTTP/1.1\r\nHost: x\nA: b\r\n\r\n", false},
		{"folded field", "GET / HTTP/1.1\r\nHost: x\r\nA: b\r\n c\r\n\r\n", false},
		{"space before colon", "GET / HTTP/1.1\r\nHost : x\r\n\r\n", false},
		{"control byte in value", "GET / HTTP/1.1\r\nHost: x\r\nA: b\x00c\r\n\r\n", false},
		{"too many connection tokens", "GET / HTTP/1.1\r\nHost: x\r\nConnection: a,b,c,d,e,f,g,h,i\r\n\r\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw := []byte(tc.head)
			if n := headEnd(raw); n != len(raw) {
				t.Fatalf("headEnd = %d, want %d", n, len(raw))
			}
			if got := parseRequest(raw).plain; got != tc.plain {
				t.Errorf("plain = %v, want %v", got, tc.plain)
			}
		})
	}
}

func TestHeadEndWaitsForTheEmptyLine(t *testing.T) {
	for _, s := range []string{"", "GET / HTTP/1.1\r\n", "GET / HTTP/1.1\r\nHost: x\r\n", "GET / HTTP/1.1\r\nHost: x\r\n\r"} {
		if n := headEnd([]byte(s)); n != -1 {
			t.Errorf("headEnd(%q) = %d, want -1", s, n)
		}
	}
}

func TestUpstreamHeadDropsHopByHop(t *testing.T) {
	raw := "POST /p?q=1 HTTP/1.1\r\nHost: svc\r\nConnection: keep-alive, X-Drop\r\nX-Drop: 1\r\n" +
		"Keep-Alive: timeout=5\r\nProxy-Connection: keep-alive\r\nTe: gzip, trailers\r\n" +
		"Trailer: X-T\r\nTransfer-Encoding: chunked\r\nX-Keep: a:b\r\n\r\n"
	req := parseRequest([]byte(raw))
	if !req.plain {
		t.Fatal("not plain")
	}
	want := "POST /p?q=1 HTTP/1.1\r\nHost: svc\r\nTrailer: X-T\r\nX-Keep: a:b\r\nTe: trailers\r\nTransfer-Encoding: chunked\r\n\r\n"
	if got := string(req.appendUpstream(nil)); got != want {
		t.Errorf("upstream head:\n%q\nwant\n%q", got, want)
	}
}

func TestClientHeadFromResponse(t *testing.T) {
	for _, tc := range []struct {
		name, in, method string
		closing          bool
		want             string
		reusable         bool
	}{
		{"length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: X-H\r\nX-H: 1\r\n\r\n", "GET", false,
			"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n", true},
		{"chunked drops length", "HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\nContent-Length: 9\r\nTrailer: X-T\r\n\r\n", "POST", false,
			"HTTP/1.1 201 Created\r\nTrailer: X-T\r\nTransfer-Encoding: chunked\r\n\r\n", true},
		{"until close", "HTTP/1.1 200 OK\r\nX-A: 1\r\n\r\n", "GET", true,
			"HTTP/1.1 200 OK\r\nX-A: 1\r\nConnection: close\r\n\r\n", false},
		{"http/1.0 bare LF", "HTTP/1.0 404 Not Found\nContent-Length: 0\n\n", "GET", false,
			"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n", false},
		{"upstream closes", "HTTP/1.1 503 Busy\r\nConnection: close\r\nContent-Length: 0\r\n\r\n", "GET", false,
			"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n", false},
		{"no reason", "HTTP/1.1 204\r\n\r\n", "DELETE", false, "HTTP/1.1 204 \r\n\r\n", true},
		{"head", "HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", "HEAD", false,
			"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := parseResponse([]byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if got := string(res.appendClient(nil, tc.closing)); got != tc.want {
				t.Errorf("client head:\n%q\nwant\n%q", got, tc.want)
			}
			if got := res.reusable(tc.method == "HEAD"); got != tc.reusable {
				t.Errorf("reusable = %v, want %v", got, tc.reusable)
			}
		})
	}
}

func TestBadResponseHeads(t *testing.T) {
	for _, in := range []string{
		"HTTP/2 200 OK\r\n\r\n", "HTTP/1.1 20 OK\r\n\r\n", "HTTP/1.1 2x0 OK\r\n\r\n", "ICY 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "HTTP/1.1 200 OK\r\nBad Header\r\n\r\n",
	} {
		if _, err := parseResponse([]byte(in)); err == nil {
			t.Errorf("%q: accepted", in)
		}
	}
}

func TestChunkSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "a": 10, "1F": 31, "10;ext=1": 16, "ff ": 255,
		"5;a": 5, "5;a=b;c": 5, "5; a = b": 5, `5;a="x;y"`: 5, `5;a="x\"y"`: 5, "5;a=b ": 5} {
		if n, ok := chunkSize([]byte(in)); !ok || n != want {
			t.Errorf("%q: %d %v, want %d", in, n, ok, want)
		}
	}
	for _, in := range []string{"", "g", "-1", strings.Repeat("f", 16), ";x",
		"5 ;a", "5;", "5;=x", `5;a="xy`, "5;a=\x01", "5;a b", "0x5"} {
		if _, ok := chunkSize([]byte(in)); ok {
			t.Errorf("%q accepted", in)
		}
	}
}

// TestHopByHopNameFollowsTheList: the fast path drops exactly
// the names removeHopByHop drops, except Trailer (relayed with the
// trailers), whatever their case.
func TestHopByHopNameFollowsTheList(t *testing.T) {
	for _, k := range hopByHop {
		for _, name := range []string{k, strings.ToLower(k), strings.ToUpper(k)} {
			if got, want := hopByHopName([]byte(name)), k != "Trailer"; got != want {
				t.Errorf("hopByHopName(%q) = %v, want %v", name, got, want)
			}
		}
	}
	for _, name := range []string{"Host", "Content-Length", "Trailers", "Tee", "X-Connection"} {
		if hopByHopName([]byte(name)) {
			t.Errorf("hopByHopName(%q) = true", name)
		}
	}
}
