package localcluster

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestClusterUpRefusesTakenPort: with a port the cluster needs already in
// use, cluster-up fails with an error naming the port and creates nothing.
// It runs after cluster-down (integration/test.sh), when no cluster owns
// the port.
func TestClusterUpRefusesTakenPort(t *testing.T) {
	e := readTeardownEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:10259") // kube-scheduler's port
	if err != nil {
		t.Fatalf("taking the port for the test: %v", err)
	}
	defer ln.Close()
	up, err := filepath.Abs("../cluster/up.sh")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(up).CombinedOutput()
	if err == nil {
		exec.Command(filepath.Join(filepath.Dir(up), "down.sh")).Run()
		t.Fatalf("cluster-up succeeded with port 10259 taken:\n%s", out)
	}
	if !strings.Contains(string(out), "port 10259 is already in use") {
		t.Errorf("cluster-up's error does not name the port:\n%s", out)
	}
	for _, dir := range []string{e.stateDir, e.runDir} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("cluster-up left %s behind after refusing to start (err=%v)", dir, err)
		}
	}
}
