package xtables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Pending is an iptables-restore process started before its input is
// known, so that its start (exec, dynamic linking) overlaps other work,
// such as the pod lookup. It does nothing until fed: it takes the xtables
// lock only when it reads a table, and an input closed empty changes
// nothing. It lives in the network namespace of the thread that started it.
type Pending struct {
	r      *Runner
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr bytes.Buffer
	done   bool
}

// StartRestore starts `iptables-restore --noflush --wait` in the calling
// thread's network namespace. Feed it with Restore or end it with Cancel.
func (r *Runner) StartRestore() (*Pending, error) {
	p := &Pending{r: r, cmd: exec.Command(r.restore, r.restoreArgs()...)}
	p.cmd.Stderr = &p.stderr
	var err error
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("%s: %w", p.describe(), err)
	}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", p.describe(), err)
	}
	return p, nil
}

func (r *Runner) restoreArgs() []string {
	return []string{"--noflush", "--wait", strconv.Itoa(int(r.cfg.LockWait / time.Second))}
}

// timeout bounds a run: the lock wait and then some.
func (r *Runner) timeout() time.Duration { return r.cfg.LockWait + 5*time.Second }

func (p *Pending) describe() string {
	return filepath.Base(p.r.restore) + " " + strings.Join(p.r.restoreArgs(), " ")
}

// Restore feeds script, which the process applies as one transaction
// (every line takes effect or none does), and waits for it. When it fails
// because the binaries are too old, the error says so.
func (p *Pending) Restore(ctx context.Context, script string) error {
	if p.done {
		return errors.New("iptables-restore was already fed or cancelled")
	}
	err := p.finish(ctx, script)
	if err == nil {
		return nil
	}
	err = fmt.Errorf("%s: %w: %s", p.describe(), err, strings.TrimSpace(p.stderr.String()))
	if verr := p.r.CheckVersion(); verr != nil {
		return fmt.Errorf("%w (%w)", err, verr)
	}
	return err
}

// Cancel ends an unfed process by closing its input, which changes
// nothing. It is a no-op after Restore.
func (p *Pending) Cancel() {
	if !p.done {
		_ = p.finish(context.Background(), "")
	}
}

// finish writes input, closes it and waits, killing the process when ctx
// or the run's timeout expires first.
func (p *Pending) finish(ctx context.Context, input string) error {
	p.done = true
	ctx, cancel := context.WithTimeout(ctx, p.r.timeout())
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = p.cmd.Process.Kill() })
	defer stop()
	_, werr := io.WriteString(p.stdin, input)
	cerr := p.stdin.Close()
	if err := p.cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return err
	}
	return errors.Join(werr, cerr)
}
