package integration_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/weavejobs/weave/coordinator"
	"github.com/weavejobs/weave/internal/auth"
	"github.com/weavejobs/weave/internal/testwait"
	"github.com/weavejobs/weave/internal/wire"
)

// The weave binary, built once per test binary run, for tests of the CLI's connection flags.
var weaveBinary struct {
	once sync.Once
	path string
	err  error
}

func weaveCLI(t *testing.T) string {
	t.Helper()
	weaveBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "weave-cli-")
		if err != nil {
			weaveBinary.err = err
			return
		}
		path := filepath.Join(dir, "weave")
		if out, err := exec.Command("go", "build", "-o", path, "github.com/weavejobs/weave/cmd/weave").CombinedOutput(); err != nil {
			weaveBinary.err = fmt.Errorf("build weave: %v\n%s", err, out)
			return
		}
		weaveBinary.path = path
	})
	if weaveBinary.err != nil {
		t.Fatal(weaveBinary.err)
	}
	return weaveBinary.path
}

// testPKI is a certificate authority with a server certificate for 127.0.0.1 and a client
// certificate, written as PEM files.
type testPKI struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	dir := t.TempDir()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "weave test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (cert, key string) {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kder)
	}
	p := testPKI{ca: write("ca.pem", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// nkeyUser creates a user nkey and writes its seed to a file.
func nkeyUser(t *testing.T) (public, seedFile string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	public, err = kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	seedFile = filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(seedFile, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return public, seedFile
}

// TestTLSAndNkeyAuth: with TLS (a server certificate, client certificates verified) and nkey
// users holding the weave auth permissions, a coordinator connects with the Go options and the
// weave CLI gets its status with --tlsca, --tlscert, --tlskey, --nkey and --inbox-prefix.
func TestTLSAndNkeyAuth(t *testing.T) {
	t.Parallel()
	const ns = "tlsnk"
	names, _ := wire.NewNames(ns)
	pki := newTestPKI(t)
	coordPub, coordSeed := nkeyUser(t)
	obsPub, obsSeed := nkeyUser(t)
	entries, err := auth.Entries(names, []auth.User{{Role: auth.Coordinator}, {Role: auth.Observer}})
	if err != nil {
		t.Fatal(err)
	}
	entries[0].Identity = []string{fmt.Sprintf("nkey: %q", coordPub)}
	entries[1].Identity = []string{fmt.Sprintf("nkey: %q", obsPub)}
	var conf bytes.Buffer
	fmt.Fprintf(&conf, "tls { cert_file: %q, key_file: %q, ca_file: %q, verify: true }\n", pki.serverCert, pki.serverKey, pki.ca)
	if err := auth.WriteServerConfig(&conf, names, entries); err != nil {
		t.Fatal(err)
	}
	srv := startNATSProc(t, conf.String())
	url := "tls://" + srv.addr()

	nkeyOpt, err := nats.NkeyOptionFromSeed(coordSeed)
	if err != nil {
		t.Fatal(err)
	}
	coordNC, err := nats.Connect(url, nkeyOpt, nats.RootCAs(pki.ca), nats.ClientCert(pki.clientCert, pki.clientKey),
		nats.CustomInboxPrefix(entries[0].InboxPrefix))
	if err != nil {
		t.Fatalf("coordinator connect over TLS with an nkey: %v", err)
	}
	t.Cleanup(coordNC.Close)
	c, err := coordinator.New(coordNC, coordinator.Config{Namespace: ns, Logger: testLogger("coordinator")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("coordinator: %v", err)
		}
	})

	// The CLI, as the observer.
	weave := weaveCLI(t)
	var st coordinator.Status
	testwait.For(t, 30*time.Second, "weave status over TLS with an nkey", func() bool {
		out, err := exec.Command(weave, "status", "--json", "--nats", url, "--namespace", ns,
			"--tlsca", pki.ca, "--tlscert", pki.clientCert, "--tlskey", pki.clientKey,
			"--nkey", obsSeed, "--inbox-prefix", entries[1].InboxPrefix).Output()
		return err == nil && json.Unmarshal(out, &st) == nil
	})
	if st.Namespace != ns {
		t.Fatalf("status of namespace %q, want %q", st.Namespace, ns)
	}
	// Without the client certificate the server refuses the connection.
	out, err := exec.Command(weave, "status", "--nats", url, "--namespace", ns, "--tlsca", pki.ca,
		"--nkey", obsSeed, "--inbox-prefix", entries[1].InboxPrefix).CombinedOutput()
	if err == nil {
		t.Fatalf("weave status without a client certificate succeeded: %s", out)
	}
}
