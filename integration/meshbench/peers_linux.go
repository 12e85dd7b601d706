package meshbench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/template"
)

// The peer proxies: Debian's nginx and HAProxy run as sidecar pairs
// equivalent to the Plexus pair, one worker thread each, keep-alive
// connection reuse on both legs; with certificates the pair speaks mutual
// TLS between its sides (the inbound side requires a client certificate
// from the anchors, the outbound side presents one and verifies the
// server's chain and name).

// peerCipher is the TLS 1.3 cipher suite the peers use: the one Go's TLS
// picks between the Plexus proxies on a machine with AES instructions.
const peerCipher = "TLS_AES_128_GCM_SHA256"

// route is one listener of a peer proxy and where it forwards. A peer
// cannot forward to a connection's original destination, so it has one
// listener per server port it carries.
type route struct {
	Listen   int
	Upstream string
}

// peerProxy is one peer: its configurations for HTTP/1.1 and for HTTP/2
// (prior-knowledge h2c from the client, h2 over mutual TLS between the
// sides, h2c to the server), and its command.
type peerProxy struct {
	name    string
	h1, h2  *template.Template
	command func(confPath string) []string
}

var (
	nginx = peerProxy{
		name: "nginx",
		h1:   template.Must(template.New("nginx").Parse(nginxHead + nginxH1 + "}\n")),
		// grpc_pass is nginx's only HTTP/2 upstream: it carries any
		// HTTP/2 request, h2c GETs included.
		h2:      template.Must(template.New("nginx-h2").Parse(nginxHead + nginxH2 + "}\n")),
		command: func(conf string) []string { return []string{"nginx", "-c", conf, "-g", "daemon off;"} },
	}
	haproxy = peerProxy{
		name:    "haproxy",
		h1:      template.Must(template.New("haproxy").Parse(haproxyHead + haproxyH1)),
		h2:      template.Must(template.New("haproxy-h2").Parse(haproxyHead + haproxyH2)),
		command: func(conf string) []string { return []string{"haproxy", "-db", "-f", conf} },
	}
)

const nginxHead = `
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
    keepalive_requests 1000000;
{{- range .Routes}}
    upstream up{{.Listen}} {
        server {{.Upstream}};
        keepalive 256;
        keepalive_requests 1000000;
        keepalive_time 1h;
    }
{{- end}}
`

// nginxServerTLS is the inbound side's listener settings after "listen".
const nginxServerTLS = `
        ssl_protocols TLSv1.3;
        ssl_conf_command Ciphersuites {{$.Cipher}};
        ssl_certificate {{$.Certs.ServerChain}};
        ssl_certificate_key {{$.Certs.ServerKey}};
        ssl_client_certificate {{$.Certs.Anchors}};
        ssl_verify_client on;
        ssl_verify_depth 3;`

// nginxUpstreamTLS is the outbound side's upstream settings for module
// (proxy or grpc): the client certificate, and the server's chain and
// name verified.
func nginxUpstreamTLS(module string) string {
	return strings.ReplaceAll(`
            M_ssl_protocols TLSv1.3;
            M_ssl_conf_command Ciphersuites {{$.Cipher}};
            M_ssl_certificate {{$.Certs.ClientChain}};
            M_ssl_certificate_key {{$.Certs.ClientKey}};
            M_ssl_trusted_certificate {{$.Certs.Anchors}};
            M_ssl_verify on;
            M_ssl_verify_depth 3;
            M_ssl_name {{$.Certs.ServerName}};
            M_ssl_server_name on;
            M_ssl_session_reuse on;`, "M_", module+"_")
}

var nginxH1 = `
{{- range .Routes}}
    server {
{{- if and $.Certs $.Inbound}}
        listen {{.Listen}} ssl reuseport;` + nginxServerTLS + `
{{- else}}
        listen {{.Listen}} reuseport;
{{- end}}
        location / {
            proxy_http_version 1.1;
            proxy_set_header Connection "";
{{- if and $.Certs (not $.Inbound)}}
            proxy_pass https://up{{.Listen}};` + nginxUpstreamTLS("proxy") + `
{{- else}}
            proxy_pass http://up{{.Listen}};
{{- end}}
        }
    }
{{- end}}
`

var nginxH2 = `
{{- range .Routes}}
    server {
{{- if $.Inbound}}
        listen {{.Listen}} ssl http2 reuseport;` + nginxServerTLS + `
{{- else}}
        listen {{.Listen}} http2 reuseport;
{{- end}}
        location / {
{{- if $.Inbound}}
            grpc_pass grpc://up{{.Listen}};
{{- else}}
            grpc_pass grpcs://up{{.Listen}};` + nginxUpstreamTLS("grpc") + `
{{- end}}
        }
    }
{{- end}}
`

const haproxyHead = `
global
    nbthread 1
    maxconn 4096
    user {{.User}}
    group {{.User}}
    ssl-default-bind-options ssl-min-ver TLSv1.3
    ssl-default-server-options ssl-min-ver TLSv1.3
    ssl-default-bind-ciphersuites {{.Cipher}}
    ssl-default-server-ciphersuites {{.Cipher}}
defaults
    mode http
    option http-keep-alive
    http-reuse always
    timeout connect 5s
    timeout client 60s
    timeout server 60s
    timeout http-keep-alive 60s
`

// haproxyServerTLS is the outbound side's server settings: the client
// certificate, and the server's chain and name verified.
const haproxyServerTLS = `ssl verify required ca-file {{$.Certs.Anchors}} crt {{$.Certs.ClientPEM}} verifyhost {{$.Certs.ServerName}} sni str({{$.Certs.ServerName}})`

const haproxyH1 = `
{{- range .Routes}}
frontend f{{.Listen}}
{{- if $.Inbound}}
    bind :{{.Listen}} ssl crt {{$.Certs.ServerPEM}} verify required ca-file {{$.Certs.Anchors}} alpn http/1.1
{{- else}}
    bind :{{.Listen}}
{{- end}}
    default_backend b{{.Listen}}
backend b{{.Listen}}
{{- if $.Inbound}}
    server app {{.Upstream}} pool-max-conn 256
{{- else}}
    server peer {{.Upstream}} pool-max-conn 256 ` + haproxyServerTLS + ` alpn http/1.1
{{- end}}
{{- end}}
`

const haproxyH2 = `
{{- range .Routes}}
frontend f{{.Listen}}
{{- if $.Inbound}}
    bind :{{.Listen}} ssl crt {{$.Certs.ServerPEM}} verify required ca-file {{$.Certs.Anchors}} alpn h2
{{- else}}
    bind :{{.Listen}} proto h2
{{- end}}
    default_backend b{{.Listen}}
backend b{{.Listen}}
{{- if $.Inbound}}
    server app {{.Upstream}} proto h2 pool-max-conn 256
{{- else}}
    server peer {{.Upstream}} pool-max-conn 256 ` + haproxyServerTLS + ` alpn h2
{{- end}}
{{- end}}
`

// start writes the peer's configuration (HTTP/2 when h2) into its own
// directory, runs it in netns and waits until every route listens.
func (pp peerProxy) start(netns string, routes []route, h2, inbound bool, certs *PeerCerts, logDir string) (*Sidecar, error) {
	dir, err := os.MkdirTemp(logDir, pp.name+"-")
	if err != nil {
		return nil, err
	}
	os.Chmod(dir, 0o755)
	conf := pp.h1
	if h2 {
		conf = pp.h2
	}
	var b bytes.Buffer
	err = conf.Execute(&b, map[string]any{"User": peerUser, "Dir": dir, "Routes": routes, "Inbound": inbound, "Certs": certs, "Cipher": peerCipher})
	if err != nil {
		return nil, err
	}
	confPath := filepath.Join(dir, pp.name+".conf")
	if err := os.WriteFile(confPath, b.Bytes(), 0o644); err != nil {
		return nil, err
	}
	s := &Sidecar{Name: fmt.Sprintf("%s:%d@%s", pp.name, routes[0].Listen, netns), log: filepath.Join(dir, "stderr.log")}
	s.cmd = exec.Command("ip", append([]string{"netns", "exec", netns}, pp.command(confPath)...)...)
	if err := s.start(); err != nil {
		return nil, err
	}
	for _, r := range routes {
		if err := waitFor(listening(netns, r.Listen), s); err != nil {
			return nil, err
		}
	}
	return s, nil
}
