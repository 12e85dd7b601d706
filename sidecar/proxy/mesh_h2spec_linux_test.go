package proxy

import (
	"encoding/xml"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/plexus-mesh/plexus/testsupport/fakedestination"
)

// TestMeshH2Spec runs h2spec (the HTTP/2 conformance suite, built by
// make deps) against Go's own h2c server, then against the same server
// reached through the mesh (the client pod's proxy, mTLS, the server
// pod's proxy): every test Go's server passes must pass through the mesh.
func TestMeshH2Spec(t *testing.T) {
	bin := os.Getenv("PLEXUS_H2SPEC")
	if bin == "" {
		t.Skip("PLEXUS_H2SPEC is not set (make test builds h2spec and sets it)")
	}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("h2spec\n"))
	})
	serve := func(ln net.Listener) {
		srv := &http.Server{Handler: handler, Protocols: new(http.Protocols)}
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	dir := t.TempDir()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	serve(ln)
	port := ln.Addr().(*net.TCPAddr).Port
	direct := h2spec(t, exec.Command(bin, "-h", "127.0.0.1", "-p", fmt.Sprint(port), "-j", filepath.Join(dir, "direct.xml")), filepath.Join(dir, "direct.xml"))

	m, dest := newMTLSMesh(t, nil)
	tgt := fmt.Sprintf("%s:8080", serverIP)
	dest.Set(tgt, fakedestination.Add(fakedestination.Endpoint(tgt, serverPodID)))
	serve(m.server.listen(t, ":8080"))
	waitFor(t, "server proxy ready", func() bool {
		code, err := m.server.admin("GET", "/ready")
		return err == nil && code == 200
	})
	// Through the mesh each test waits up to 5 s for its answer (h2spec's
	// default is 2 s): make test runs packages side by side on two cores.
	meshed := h2spec(t, m.client.ns.Command(bin, "-o", "5", "-h", serverIP, "-p", "8080", "-j", filepath.Join(dir, "mesh.xml")), filepath.Join(dir, "mesh.xml"))

	if len(direct.passed) < 130 {
		t.Fatalf("Go's own server passed %d h2spec tests, want ≥ 130: %v", len(direct.passed), direct.failed)
	}
	for _, name := range direct.passed {
		if !slices.Contains(meshed.passed, name) {
			t.Errorf("through the mesh, h2spec fails %q, which Go's own server passes", name)
		}
	}
	t.Logf("h2spec: Go's server passes %d of %d, the mesh %d; failed through the mesh: %v", len(direct.passed), direct.total, len(meshed.passed), meshed.failed)
	in := map[string]string{"direction": "inbound", "target_addr": tgt, "tls": "true", "client_id": clientPodID.String()}
	if got := sumSamples(m.server.scrape(t), "request_total", in); got < 10 {
		t.Errorf("the server proxy counted %v h2spec requests over mTLS, want ≥ 10: the mesh did not carry them", got)
	}
}

// h2specResult is one h2spec run's verdicts by test ("section: name").
type h2specResult struct {
	total          int
	passed, failed []string
}

// h2spec runs cmd (h2spec writing a JUnit report to report) and reads
// the report; h2spec exits non-zero when a test fails, which is judged
// by the caller.
func h2spec(t *testing.T, cmd *exec.Cmd, report string) h2specResult {
	t.Helper()
	out, _ := cmd.CombinedOutput()
	raw, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("h2spec wrote no report: %v\n%s", err, out)
	}
	var suites struct {
		Suites []struct {
			Name  string `xml:"name,attr"`
			Cases []struct {
				Name    string    `xml:"classname,attr"`
				Failure *struct{} `xml:"failure"`
				Error   *struct{} `xml:"error"`
				Skipped *struct{} `xml:"skipped"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(raw, &suites); err != nil {
		t.Fatalf("h2spec report: %v", err)
	}
	var r h2specResult
	for _, s := range suites.Suites {
		for _, c := range s.Cases {
			name := s.Name + ": " + c.Name
			r.total++
			switch {
			case c.Skipped != nil:
			case c.Failure != nil || c.Error != nil:
				r.failed = append(r.failed, name)
			default:
				r.passed = append(r.passed, name)
			}
		}
	}
	return r
}
