package h1diff

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"text/template"
)

// nginxConf makes nginx an origin that answers every request with
// "<method> <request_uri>" and logs each one it parsed: the port, its
// connection, status, length (line, headers and body) and request line.
var nginxConf = template.Must(template.New("nginx").Parse(`
user www-data;
worker_processes 1;
pid {{.Dir}}/nginx.pid;
error_log {{.Dir}}/error.log info;
events { worker_connections 1024; }
http {
    log_format h1diff '$server_port $connection $status $request_length "$request"';
    access_log {{.Dir}}/access.log h1diff;
    client_body_temp_path {{.Dir}}/body;
    proxy_temp_path {{.Dir}}/proxy;
    fastcgi_temp_path {{.Dir}}/fastcgi;
    uwsgi_temp_path {{.Dir}}/uwsgi;
    scgi_temp_path {{.Dir}}/scgi;
    server {
{{- range .Ports}}
        listen {{.}};
{{- end}}
        location / {
            default_type text/plain;
            return 200 "$request_method $request_uri\n";
        }
    }
}
`))

// nginxOrigin is Debian's nginx (nginx-light) in the server namespace.
type nginxOrigin struct {
	dir    string
	stderr *syncBuffer
}

// startNginx runs nginx listening on ports (in the foreground, as
// integration/meshbench's nginx peers run), and waits until it listens.
func startNginx(t *testing.T, tp *topology, ports []int) *nginxOrigin {
	t.Helper()
	o := &nginxOrigin{dir: t.TempDir(), stderr: &syncBuffer{}}
	if err := os.Chmod(o.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var conf bytes.Buffer
	if err := nginxConf.Execute(&conf, map[string]any{"Dir": o.dir, "Ports": ports}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(o.dir, "nginx.conf")
	if err := os.WriteFile(path, conf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	tp.startInServer(t, o.stderr, "nginx", "-c", path, "-g", "daemon off;")
	t.Cleanup(func() {
		if t.Failed() {
			errLog, _ := os.ReadFile(filepath.Join(o.dir, "error.log"))
			t.Logf("nginx stderr:\n%s\nnginx error.log:\n%s", o.stderr.String(), errLog)
		}
	})
	if err := tp.waitListening(ports[len(ports)-1]); err != nil {
		t.Fatalf("%v\nnginx: %s", err, o.stderr.String())
	}
	return o
}

// requests reads the access log for what nginx parsed on port. nginx logs
// a request once it has answered it. A request it rejected while parsing
// (400, 414, 494) or whose line is not "METHOD target [version]" is a
// parse error, with the line it read.
func (o *nginxOrigin) requests(port int) ([]parsed, error) {
	f, err := os.Open(filepath.Join(o.dir, "access.log"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []parsed
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		// port connection status length "request"
		f := strings.SplitN(sc.Text(), " ", 5)
		if len(f) < 5 || f[0] != strconv.Itoa(port) {
			continue
		}
		conn, _ := strconv.Atoi(f[1])
		length, _ := strconv.Atoi(f[3])
		req := strings.TrimSuffix(strings.TrimPrefix(f[4], `"`), `"`)
		p := parsed{conn: conn, length: length}
		rl := strings.Split(req, " ")
		switch {
		case f[2] == "400" || f[2] == "414" || f[2] == "494":
			p.err, p.line = "rejected with "+f[2], req
		case (len(rl) == 2 || len(rl) == 3) && rl[0] != "" && rl[1] != "":
			p.method, p.target = rl[0], rl[1]
		default:
			p.err, p.line = "status "+f[2]+", no request line", req
		}
		out = append(out, p)
	}
	return out, sc.Err()
}
