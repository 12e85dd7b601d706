package meshbench

import (
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// PeerCerts are the files the peer mTLS pairs use: leaves from the same
// issuer as the Plexus pair's (ECDSA P-256, the issuer in the chain), each
// naming its pod's SPIFFE ID and, because nginx and HAProxy verify DNS
// names rather than URI SANs, a DNS name shaped like Linkerd's identities.
type PeerCerts struct {
	Anchors                string // the trust anchors, PEM
	ServerChain, ServerKey string // the inbound side's certificate chain and key
	ClientChain, ClientKey string // the outbound side's
	ServerPEM, ClientPEM   string // chain and key in one file (HAProxy)
	ServerName             string // the DNS name the outbound side verifies
}

// writePeerCerts issues the peers' leaves from issuer into dir.
func writePeerCerts(dir string, anchor, issuer pki.CA) (*PeerCerts, error) {
	dir = filepath.Join(dir, "peer-certs")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	pc := &PeerCerts{Anchors: filepath.Join(dir, "anchors.pem"), ServerName: dnsName(serverPod)}
	if err := os.WriteFile(pc.Anchors, pki.EncodeCerts(anchor.Cert), 0o644); err != nil {
		return nil, err
	}
	for _, side := range []struct {
		pod              benchPod
		chain, key, both *string
	}{
		{serverPod, &pc.ServerChain, &pc.ServerKey, &pc.ServerPEM},
		{clientPod, &pc.ClientChain, &pc.ClientKey, &pc.ClientPEM},
	} {
		chain, key, err := peerLeaf(side.pod, issuer)
		if err != nil {
			return nil, err
		}
		*side.chain, *side.key, *side.both = filepath.Join(dir, side.pod.name+".crt"), filepath.Join(dir, side.pod.name+".key"), filepath.Join(dir, side.pod.name+".pem")
		for path, data := range map[string][]byte{*side.chain: chain, *side.key: key, *side.both: append(append([]byte{}, chain...), key...)} {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				return nil, err
			}
		}
	}
	return pc, nil
}

func dnsName(p benchPod) string {
	return p.name + "." + benchNamespace + ".serviceaccount.identity." + controlNamespace + "." + spiffe.DefaultTrustDomain
}

// peerLeaf is a client-and-server leaf for p: its chain (leaf, issuer) and
// key, PEM.
func peerLeaf(p benchPod, issuer pki.CA) (chain, key []byte, err error) {
	k, err := pki.NewKey()
	if err != nil {
		return nil, nil, err
	}
	sn, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	id := spiffe.New(spiffe.DefaultTrustDomain, benchNamespace, p.name)
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: dnsName(p)},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		DNSNames:     []string{dnsName(p)},
		URIs:         []*url.URL{id.URL()},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer.Cert, &k.PublicKey, issuer.Key)
	if err != nil {
		return nil, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	if key, err = pki.EncodeKey(k); err != nil {
		return nil, nil, err
	}
	return pki.EncodeCerts(leaf, issuer.Cert), key, nil
}
