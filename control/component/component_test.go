package component

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"log/slog"
	"strings"
	"testing"
)

func TestParseFlags(t *testing.T) {
	newFS := func() (*flag.FlagSet, *string) {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		return fs, fs.String("addr", ":1", "")
	}
	fs, addr := newFS()
	if err := ParseFlags(fs, []string{"--addr", ":2"}, func() error { return nil }); err != nil || *addr != ":2" {
		t.Fatalf("ParseFlags = %v, addr %q", err, *addr)
	}
	fs, _ = newFS()
	if err := ParseFlags(fs, []string{"stray"}, nil); err == nil || !strings.Contains(err.Error(), `unexpected arguments ["stray"]`) {
		t.Errorf("a positional argument: %v", err)
	}
	fs, _ = newFS()
	if err := ParseFlags(fs, []string{"--nope"}, nil); err == nil {
		t.Error("an unknown flag was accepted")
	}
	fs, _ = newFS()
	bad := errors.New("--addr: bad")
	if err := ParseFlags(fs, nil, func() error { return bad }); !errors.Is(err, bad) || !strings.HasPrefix(err.Error(), "invalid configuration: ") {
		t.Errorf("validation error = %v", err)
	}
}

func TestLoggerLevelAndRegistry(t *testing.T) {
	var buf bytes.Buffer
	log := Logger(&buf, slog.LevelWarn)
	log.Info("hidden")
	log.Warn("shown")
	if out := buf.String(); strings.Contains(out, "hidden") || !strings.Contains(out, `"msg":"shown"`) {
		t.Errorf("log output %q", out)
	}
	mfs, err := Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, mf := range mfs {
		have[mf.GetName()] = true
	}
	if !have["go_goroutines"] || !have["process_cpu_seconds_total"] {
		t.Errorf("registry lacks the Go or process collector: %v", have)
	}
}
