package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/pluginreport"
)

// commandReport collects what one ADD, DEL or CHECK tells the node agent
// when it ends (see pluginreport); the agent turns it into metrics.
type commandReport struct {
	cmd   string
	args  *skel.CmdArgs
	start time.Time

	decided bool // ADD reached a decision
	mesh    bool
	decide  time.Duration
}

func newReport(cmd string, args *skel.CmdArgs) *commandReport {
	return &commandReport{cmd: cmd, args: args, start: time.Now()}
}

// decidedAfter records ADD's decision and how long it took.
func (r *commandReport) decidedAfter(mesh bool, took time.Duration) {
	r.decided, r.mesh, r.decide = true, mesh, took
}

// report is the datagram for the command's result err.
func (r *commandReport) report(err error) pluginreport.Report {
	elapsed := time.Since(r.start)
	rep := pluginreport.Report{Command: r.cmd, Outcome: pluginreport.Success, ElapsedMS: pluginreport.Millis(elapsed)}
	if r.decided {
		rep.DecideMS = pluginreport.Millis(min(r.decide, elapsed))
		if !r.mesh {
			rep.Outcome = pluginreport.Skipped
		}
	}
	if err != nil {
		rep.Outcome, rep.Code = pluginreport.Error, types.ErrInternal
		var e *types.Error
		if errors.As(err, &e) && e.Code != 0 && e.Code <= 999 {
			rep.Code = e.Code
		}
	}
	return rep
}

// reportKeys are the config keys sendReport needs. It reads them from
// stdin itself, so that a command whose config does not validate is
// reported too.
type reportKeys struct {
	ReportSocket string `json:"report_socket"`
	LogLevel     string `json:"log_level"`
	LogFile      string `json:"log_file"`
}

// sendReport sends the report for err to the config's report_socket, if
// one is set. It never waits and never fails the command: an agent that
// is not listening is logged at debug, other trouble at warn.
func (p *Plugin) sendReport(r *commandReport, err error) {
	var keys reportKeys
	if json.Unmarshal(r.args.StdinData, &keys) != nil || keys.ReportSocket == "" {
		return
	}
	sendErr := pluginreport.Send(keys.ReportSocket, r.report(err))
	if sendErr == nil {
		return
	}
	level := slog.LevelWarn
	if errors.Is(sendErr, pluginreport.ErrNoListener) {
		level = slog.LevelDebug
	}
	if configured, _ := netconf.ParseLevel(keys.LogLevel); level < configured {
		return // do not open the log file for a line it would drop
	}
	log, done := p.logger(&netconf.NetConf{LogLevel: keys.LogLevel, LogFile: keys.LogFile}, r.cmd, r.args)
	defer done()
	log.Log(context.Background(), level, "could not report to the node agent", "error", sendErr)
}
