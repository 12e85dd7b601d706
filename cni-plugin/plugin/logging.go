package plugin

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
)

// FileLogger returns a logger writing to conf's log_file (appending, so the
// node agent can tail and surface it) at conf's log_level, and a function
// that closes the file. Without a log_file, or when it cannot be opened, it
// logs to stderr, which the runtime shows when the plugin fails; logging
// trouble never fails the CNI call.
func FileLogger(conf *netconf.NetConf) (*slog.Logger, func()) {
	level, err := netconf.ParseLevel(conf.LogLevel)
	if err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level}
	var w io.Writer = os.Stderr
	closeFn := func() {}
	if conf.LogFile != "" {
		f, err := os.OpenFile(conf.LogFile, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o640)
		if err != nil {
			fmt.Fprintf(os.Stderr, "plexus-cni: cannot open log_file, logging to stderr: %v\n", err)
		} else {
			w = f
			closeFn = func() { _ = f.Close() }
		}
	}
	return slog.New(slog.NewTextHandler(w, opts)).With("plugin", "plexus-cni", "pid", os.Getpid()), closeFn
}
