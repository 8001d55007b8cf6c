// Package pgtest owns running a throwaway PostgreSQL cluster for tests: finding the binaries,
// initdb into a temp directory, starting it on a free loopback port, stopping and restarting
// it on the same port and data. It never skips a test when PostgreSQL is missing (`make test`
// installs it), and is only for tests.
package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// Server is one PostgreSQL cluster. Its port and data directory stay fixed across Stop and
// Start, so a URI taken before a restart works again after it.
type Server struct {
	t    testing.TB
	bin  string
	dir  string
	port int
	cred *syscall.Credential
	up   bool
}

// Start runs a cluster for the rest of t (stopped in t.Cleanup). PostgreSQL refuses to run as
// root, so as root the cluster runs as the postgres user the Debian package creates; the
// credential is set on the process itself, so no runuser or su needs to be on PATH.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t}
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) > 0 {
		s.bin = filepath.Dir(m[len(m)-1])
	} else if p, err := exec.LookPath("initdb"); err == nil {
		s.bin = filepath.Dir(p)
	} else {
		t.Fatal("PostgreSQL is not installed (make tools, or apt-get install -y postgresql)")
	}
	dir, err := os.MkdirTemp("", "hyp-pg-")
	if err != nil {
		t.Fatal(err)
	}
	s.dir = dir
	t.Cleanup(func() { os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("PostgreSQL refuses to run as root, and there is no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	s.run("initdb", "-D", s.data(), "-A", "trust", "-U", "postgres", "--no-sync")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.port = ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	s.Start()
	t.Cleanup(func() {
		if s.up {
			s.Stop()
		}
	})
	return s
}

// URI is the cluster's connection string (database postgres, no password, no TLS).
func (s *Server) URI() string {
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(s.port) + "/postgres?sslmode=disable"
}

// Stop shuts the cluster down at once (immediate mode: like a crash, sessions are cut).
func (s *Server) Stop() {
	s.t.Helper()
	s.run("pg_ctl", "-D", s.data(), "-m", "immediate", "stop")
	s.up = false
}

// Start starts a stopped cluster again on the same port and data, waiting until it answers.
func (s *Server) Start() {
	s.t.Helper()
	s.run("pg_ctl", "-D", s.data(), "-w", "-l", filepath.Join(s.dir, "log"), "-o",
		fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200", s.port, s.dir), "start")
	s.up = true
}

func (s *Server) data() string { return filepath.Join(s.dir, "data") }

func (s *Server) run(name string, args ...string) {
	s.t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	if s.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}
