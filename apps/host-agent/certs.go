package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// The files of --state-dir.
const (
	certFile        = "cert.pem"
	keyFile         = "key.pem"
	fingerprintFile = "fingerprint"
)

// fingerprint is the lowercase hex SHA-256 of a certificate's DER, without colons.
func fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}

// loadOrCreateServerCert returns the agent's serving certificate from dir, generating it on
// first start (or when the files do not parse): an ECDSA P-256 key and a self-signed certificate
// for name and ip, valid 10 years. It (re)writes dir/fingerprint. created tells which it did.
func loadOrCreateServerCert(dir, name string, ip net.IP) (cert tls.Certificate, created bool, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return tls.Certificate{}, false, err
	}
	certPEM, errCert := os.ReadFile(filepath.Join(dir, certFile))
	keyPEM, errKey := os.ReadFile(filepath.Join(dir, keyFile))
	if errCert == nil && errKey == nil {
		if cert, err = tls.X509KeyPair(certPEM, keyPEM); err == nil {
			return cert, false, writeAtomic(dir, fingerprintFile, []byte(fingerprint(cert.Certificate[0])), 0o644)
		}
	}
	certPEM, keyPEM, err = newServerCert(name, ip, time.Now())
	if err != nil {
		return tls.Certificate{}, false, err
	}
	// The key first: a crash in between leaves a cert.pem that does not match, regenerated next time.
	if err := writeAtomic(dir, keyFile, keyPEM, 0o600); err != nil {
		return tls.Certificate{}, false, err
	}
	if err := writeAtomic(dir, certFile, certPEM, 0o644); err != nil {
		return tls.Certificate{}, false, err
	}
	if cert, err = tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return tls.Certificate{}, false, err
	}
	return cert, true, writeAtomic(dir, fingerprintFile, []byte(fingerprint(cert.Certificate[0])), 0o644)
}

func newServerCert(name string, ip net.IP, now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, nil, err
	}
	template := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour), // some clock skew
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IPAddresses:           []net.IP{ip},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, template, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// writeAtomic writes dir/name through a temporary file in dir and a rename.
func writeAtomic(dir, name string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename: nothing to remove
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(dir, name))
}

// serverTLSConfig: TLS 1.2 or newer, HTTP/1.1 only (streaming upgrades need it), and a client
// certificate whose DER's SHA-256 is one of pinned; anything else fails the handshake.
func serverTLSConfig(cert tls.Certificate, pinned [][]byte) *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"http/1.1"},
		ClientAuth:   tls.RequireAnyClientCert,
		VerifyPeerCertificate: func(rawCerts [][]byte, _ [][]*x509.Certificate) error {
			if len(rawCerts) == 0 {
				return errors.New("no client certificate")
			}
			sum := sha256.Sum256(rawCerts[0])
			match := 0
			for _, p := range pinned {
				match |= subtle.ConstantTimeCompare(sum[:], p)
			}
			if match != 1 {
				return fmt.Errorf("client certificate %s is not pinned", hex.EncodeToString(sum[:8]))
			}
			return nil
		},
	}
}
