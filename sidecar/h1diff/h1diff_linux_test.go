package h1diff

import (
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/testsupport/netnstest"
)

// Every case has its own destination port per origin: the origin's log
// is attributed by port, and each case gets its own pools of upstream
// connections in both proxies, so a connection one case poisons cannot
// answer another case's requests.
const (
	goBase     = 20000 // + request case index: the strict Go origin
	nginxBase  = 21000 // + request case index: nginx
	scriptBase = 22000 // + response case index: the scripted origin
	crossPort  = 22999 // the cross-client test
)

// TestH1Diff sends every request case through the proxy pair to the strict
// Go origin and to nginx, and every response case from the scripted
// origin, all over one topology, and asserts for each:
//
//	(a) the origin parsed no request the client did not send as its own;
//	(b) the client got one final response per request, each 2xx its own
//	    request's answer, or a 4xx / close;
//	(c) then GET /after/<case> on a fresh connection to the same port gets
//	    its own answer (the proxies' pools for that port are not poisoned).
func TestH1Diff(t *testing.T) {
	netnstest.RequireRoot(t)
	g := loadGolden(t)
	tp := newTopology(t)

	var goPorts, nginxPorts, scriptPorts []int
	for i := range requestCases {
		goPorts = append(goPorts, goBase+i)
		nginxPorts = append(nginxPorts, nginxBase+i)
	}
	scripts := map[int]script{}
	for i, c := range responseCases {
		scriptPorts = append(scriptPorts, scriptBase+i)
		scripts[scriptBase+i] = c.script
	}
	extraSent := make(chan struct{})
	scripts[crossPort] = crossScript(sync.OnceFunc(func() { close(extraSent) }))
	scriptPorts = append(scriptPorts, crossPort)

	strict := startEchoOrigin(t, tp, goPorts, nil)
	scripted := startEchoOrigin(t, tp, scriptPorts, scripts)
	var ngx *nginxOrigin
	if _, err := exec.LookPath("nginx"); err == nil {
		ngx = startNginx(t, tp, nginxPorts)
	}

	t.Run("requests", func(t *testing.T) {
		for i, c := range requestCases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				t.Run("go", func(t *testing.T) {
					t.Parallel()
					log := func(port int) ([]parsed, error) { return strict.log.requests(port), nil }
					runCase(t, tp, g, "go", "requests", c.name, goBase+i, c.raw, c.want, log)
				})
				t.Run("nginx", func(t *testing.T) {
					if ngx == nil {
						t.Skip("nginx not on PATH: install Debian nginx-light (make deps-bench)")
					}
					t.Parallel()
					runCase(t, tp, g, "nginx", "requests", c.name, nginxBase+i, c.raw, c.want, ngx.requests)
				})
			})
		}
	})
	t.Run("responses", func(t *testing.T) {
		for i, c := range responseCases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				method := c.method
				if method == "" {
					method = "GET"
				}
				log := func(port int) ([]parsed, error) { return scripted.log.requests(port), nil }
				raw := method + " " + scriptTarget + " HTTP/1.1\r\nHost: s\r\n\r\n"
				runCase(t, tp, g, "script", "responses", c.name, scriptBase+i, raw, []string{method + " " + scriptTarget}, log)
			})
		}
	})
	// Alone, after the rest: it depends on timing.
	t.Run(crossName, func(t *testing.T) { testCrossClient(t, tp, g, scripted, extraSent) })

	if *update {
		g.write(t)
	}
}

// runCase runs one case of table against one origin (column): the
// exchange, then the check on a fresh connection, then what the origin
// parsed.
func runCase(t *testing.T, tp *topology, g *golden, column, table, name string, port int, raw string, want []string, originLog func(int) ([]parsed, error)) {
	cc, err := tp.exchange(port, raw, want, 0)
	if err != nil {
		t.Fatalf("client connection: %v", err)
	}
	g.check(t, table+"/"+name, column, cc.outcome())
	afterProblems := tp.after(port, name)
	got, err := originLog(port)
	if err != nil {
		t.Fatalf("origin log: %v", err)
	}
	report(t, got, append(slices.Clone(want), afterRequest(name)), afterProblems, cc)
	if t.Failed() {
		t.Logf("client sent %s\nclient read:\n%s\norigin parsed on port %d:\n%s", clip(raw), cc, port, list(got))
	}
}

// report turns (a), (b) and (c) into errors; ccs are the case's client
// connections.
func report(t *testing.T, got []parsed, want, afterProblems []string, ccs ...*clientConn) {
	t.Helper()
	for _, p := range checkOrigin(got, want) {
		t.Errorf("(a) %s", p)
	}
	for _, cc := range ccs {
		for _, p := range cc.problems() {
			t.Errorf("(b) %s", p)
		}
	}
	for _, p := range afterProblems {
		t.Errorf("(c) %s", p)
	}
}

func afterRequest(name string) string { return "GET /after/" + name }

// after is assertion (c): a fresh connection to the case's port gets its
// own answer to GET /after/<name>.
func (tp *topology) after(port int, name string) []string {
	want := afterRequest(name)
	cc, err := tp.exchange(port, want+" HTTP/1.1\r\nHost: s\r\n\r\n", []string{want}, 1)
	if err != nil {
		return []string{"fresh connection: " + err.Error()}
	}
	if f := cc.finals(); len(f) != 1 || f[0].status != 200 || !answers(f[0], want) {
		return []string{fmt.Sprintf("%q on a fresh connection did not get its own answer:\n%s", want, cc)}
	}
	return nil
}

const (
	crossName  = "cross-client"
	crossSends = "answers A, then 200 ms later an unsolicited response on that connection; B asks right after"
)

// crossScript answers A, then 200 ms later writes an unsolicited response
// on the same connection and calls sent. 200 ms is under the proxy's
// 250 ms idle probe (httpproxy/h1pool.go): a pooled connection idle for
// less is reused without a check.
func crossScript(sent func()) script {
	return script{steps: []step{{data: ok}, {pause: 200 * time.Millisecond, data: extra, then: sent}}}
}

// testCrossClient: client A's request is answered, and its upstream
// connection goes back to the pools; the origin then sends an extra
// response on it. Client B, on its own connection, asks right after the
// extra response was sent: B must get its own answer, never the extra.
// (B asks after, not before, the extra: once B's request is on the wire
// no proxy can tell an early response from B's.)
func testCrossClient(t *testing.T, tp *topology, g *golden, scripted *echoOrigin, extraSent <-chan struct{}) {
	a, err := tp.open(crossPort, []string{"GET " + scriptTarget})
	if err != nil {
		t.Fatal(err)
	}
	defer a.c.Close()
	if _, err := a.c.Write([]byte("GET " + scriptTarget + " HTTP/1.1\r\nHost: s\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	aDone := make(chan struct{})
	go func() { a.read(time.Now().Add(readWindow), 0); close(aDone) }()
	select {
	case <-extraSent:
	case <-time.After(readWindow):
		t.Fatal("the origin did not send the extra response (did A's request reach it?)")
	}
	b, err := tp.exchange(crossPort, "GET /b HTTP/1.1\r\nHost: s\r\n\r\n", []string{"GET /b"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	<-aDone
	g.check(t, "responses/"+crossName, "script", "A: "+a.outcome()+"; B: "+b.outcome())
	afterProblems := tp.after(crossPort, crossName)
	got := scripted.log.requests(crossPort)
	report(t, got, []string{"GET " + scriptTarget, "GET /b", afterRequest(crossName)}, afterProblems, a, b)
	if t.Failed() {
		t.Logf("A read:\n%s\nB read:\n%s\norigin parsed:\n%s", a, b, list(got))
	}
}

// clip quotes raw bytes for a log, shortened.
func clip(raw string) string {
	if len(raw) > 400 {
		return fmt.Sprintf("%q… (%d bytes)", raw[:400], len(raw))
	}
	return fmt.Sprintf("%q", raw)
}

func list(ps []parsed) string {
	if len(ps) == 0 {
		return "  (nothing)"
	}
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	return b.String()
}
