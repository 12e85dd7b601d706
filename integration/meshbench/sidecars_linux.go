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
	"time"
)

// Sidecar is one proxy process (and, for nginx, its workers).
type Sidecar struct {
	Name string
	cmd  *exec.Cmd
	log  string
}

// plexusPair is how one Plexus pair runs: its listeners and, for the
// mTLS pair, the environment that gives each side its pod identity.
type plexusPair struct {
	outbound, inbound, admin int
	// env is the extra environment of the side in netns (nil: none).
	env func(netns string) []string
}

// StartPlexus runs a plexus-proxy binary in netns as the proxy UID, the
// way the injector runs it, and waits until its admin server says ready.
func StartPlexus(bin, netns, logDir string, pp plexusPair) (*Sidecar, error) {
	s := &Sidecar{Name: fmt.Sprintf("plexus-proxy:%d@%s", pp.inbound, netns), log: filepath.Join(logDir, fmt.Sprintf("plexus-%d-%s.log", pp.inbound, netns))}
	uid := strconv.Itoa(proxyUID)
	s.cmd = exec.Command("ip", "netns", "exec", netns,
		"setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", bin)
	s.cmd.Env = append(os.Environ(), "PLEXUS_PROXY_LOG_LEVEL=warn",
		fmt.Sprintf("PLEXUS_PROXY_OUTBOUND_PORT=%d", pp.outbound),
		fmt.Sprintf("PLEXUS_PROXY_INBOUND_PORT=%d", pp.inbound),
		fmt.Sprintf("PLEXUS_PROXY_ADMIN_PORT=%d", pp.admin))
	if pp.env != nil {
		s.cmd.Env = append(s.cmd.Env, pp.env(netns)...)
	}
	if err := s.start(); err != nil {
		return nil, err
	}
	ready := func() error {
		return exec.Command("ip", "netns", "exec", netns, "curl", "-fsS", "-o", "/dev/null", fmt.Sprintf("http://127.0.0.1:%d/ready", pp.admin)).Run()
	}
	if err := waitFor(ready, s); err != nil {
		return nil, err
	}
	return s, nil
}

func listening(netns string, port int) func() error {
	return func() error {
		return exec.Command("ip", "netns", "exec", netns, "sh", "-c", fmt.Sprintf("ss -Hltn 'sport = :%d' | grep -q LISTEN", port)).Run()
	}
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
	RSS, PeakRSS int64 // bytes, summed over the processes
	// PSS is the proportional set size: shared pages (nginx's master and
	// worker, the libraries) are divided among their processes.
	PSS int64
	CPU time.Duration
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
		if rollup, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid)); err == nil {
			u.PSS += statusKB(rollup, "Pss:") * 1024
		}
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
