package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// EncodeCerts PEM-encodes certificates, in order.
func EncodeCerts(certs ...*x509.Certificate) []byte {
	var out []byte
	for _, c := range certs {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})...)
	}
	return out
}

// ParseCerts decodes every CERTIFICATE block of PEM text, in order. Text
// with no certificate, with blocks of another type, or with anything but
// white space after the last block, is an error.
func ParseCerts(pemText []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := pemText; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			if len(bytes.TrimSpace(rest)) != 0 {
				return nil, errors.New("trailing data that is not PEM")
			}
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is %q, want CERTIFICATE", len(certs)+1, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM CERTIFICATE found")
	}
	return certs, nil
}

// EncodeKey PEM-encodes an ECDSA private key as PKCS#8 ("PRIVATE KEY").
func EncodeKey(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("encoding private key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// ParseKey decodes the first PEM block of pemText as an ECDSA private key,
// PKCS#8 ("PRIVATE KEY") or SEC 1 ("EC PRIVATE KEY", as openssl writes it).
func ParseKey(pemText []byte) (*ecdsa.PrivateKey, error) {
	block, _ := pem.Decode(pemText)
	if block == nil {
		return nil, errors.New("no PEM private key found")
	}
	var (
		key crypto.PrivateKey
		err error
	)
	switch block.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(block.Bytes)
	default:
		return nil, fmt.Errorf("PEM block is %q, want PRIVATE KEY or EC PRIVATE KEY", block.Type)
	}
	if err != nil {
		return nil, fmt.Errorf("parsing private key: %w", err)
	}
	ec, ok := key.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("private key is %T, want ECDSA", key)
	}
	return ec, nil
}
