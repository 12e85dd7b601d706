package meshbench

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/template"
	"time"
)

// Sidecar is one proxy process (and, for nginx, its workers).
type Sidecar struct {
	Name string
	cmd  *exec.Cmd
	log  string
}

// StartPlexus runs a plexus-proxy binary in netns as the proxy UID, the
// way the injector runs it, and waits until its admin server says ready.
func StartPlexus(bin, netns, logDir string) (*Sidecar, error) {
	s := &Sidecar{Name: "plexus-proxy@" + netns, log: filepath.Join(logDir, "plexus-"+netns+".log")}
	uid := strconv.Itoa(proxyUID)
	s.cmd = exec.Command("ip", "netns", "exec", netns,
		"setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", bin)
	s.cmd.Env = append(os.Environ(), "PLEXUS_PROXY_LOG_LEVEL=warn")
	if err := s.start(); err != nil {
		return nil, err
	}
	ready := func() error {
		return exec.Command("ip", "netns", "exec", netns, "curl", "-fsS", "-o", "/dev/null", "http://127.0.0.1:4191/ready").Run()
	}
	if err := waitFor(ready, s); err != nil {
		return nil, err
	}
	return s, nil
}

var nginxConf = template.Must(template.New("nginx").Parse(`
user {{.User}};
worker_processes 1;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    client_body_temp_path {{.Dir}}/body;
    proxy_temp_path {{.Dir}}/proxy;
    fastcgi_temp_path {{.Dir}}/fastcgi;
    uwsgi_temp_path {{.Dir}}/uwsgi;
    scgi_temp_path {{.Dir}}/scgi;
    upstream backend {
        server {{.Upstream}};
        keepalive 256;
    }
    server {
        listen {{.Listen}} reuseport;
        keepalive_requests 1000000;
        location / {
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }
    }
}
`))

// StartNginx runs Debian's nginx in netns as an HTTP sidecar equivalent to
// one side of the Plexus pair: it listens on listen and forwards over
// pooled keep-alive connections to upstream.
func StartNginx(netns string, listen int, upstream string, logDir string) (*Sidecar, error) {
	dir, err := os.MkdirTemp(logDir, "nginx-")
	if err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o755)
	var conf bytes.Buffer
	err = nginxConf.Execute(&conf, map[string]any{"User": peerUser, "Dir": dir, "Upstream": upstream, "Listen": listen})
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, conf.Bytes(), 0o644); err != nil {
		return nil, err
	}
	s := &Sidecar{Name: "nginx@" + netns, log: filepath.Join(dir, "stderr.log")}
	s.cmd = exec.Command("ip", "netns", "exec", netns, "nginx", "-c", confPath, "-g", "daemon off;")
	if err := s.start(); err != nil {
		return nil, err
	}
	listening := func() error {
		return exec.Command("ip", "netns", "exec", netns, "sh", "-c", fmt.Sprintf("ss -Hltn 'sport = :%d' | grep -q LISTEN", listen)).Run()
	}
	if err := waitFor(listening, s); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Sidecar) start() error {
	f, err := os.Create(s.log)
	if err != nil {
		return err
	}
	s.cmd.Stdout, s.cmd.Stderr = f, f
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("starting %s: %w", s.Name, err)
	}
	return nil
}

// waitFor polls check until it succeeds, the sidecar exits, or 10 s pass.
func waitFor(check func() error, s *Sidecar) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		if check() == nil {
			return nil
		}
		if s.cmd.ProcessState != nil || syscall.Kill(s.cmd.Process.Pid, 0) != nil || time.Now().After(deadline) {
			logs, _ := os.ReadFile(s.log)
			s.Stop()
			return fmt.Errorf("%s did not become ready: %s", s.Name, logs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop ends the sidecar's whole process group.
func (s *Sidecar) Stop() {
	if s.cmd.Process == nil {
		return
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
}

// Usage is what the sidecar's processes hold: resident memory now, peak
// resident memory, and CPU time used so far.
type Usage struct {
	RSS, PeakRSS int64 // bytes
	CPU          time.Duration
}

// Usage sums over the sidecar's process group (nginx master and workers).
func (s *Sidecar) Usage() (Usage, error) {
	var u Usage
	pids, err := groupPIDs(s.cmd.Process.Pid)
	if err != nil {
		return u, err
	}
	for _, pid := range pids {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		u.RSS += statusKB(status, "VmRSS:") * 1024
		u.PeakRSS += statusKB(status, "VmHWM:") * 1024
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name: state is 3rd, utime 14th, stime 15th.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
		utime, _ := strconv.ParseInt(fields[11], 10, 64)
		stime, _ := strconv.ParseInt(fields[12], 10, 64)
		u.CPU += time.Duration(utime+stime) * time.Second / 100 // USER_HZ
	}
	return u, nil
}

func groupPIDs(pgid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
			pids = append(pids, pid)
		}
	}
	if len(pids) == 0 {
		return nil, errors.New("process group has no processes")
	}
	return pids, nil
}

func statusKB(status []byte, key string) int64 {
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb
		}
	}
	return 0
}
