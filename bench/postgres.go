package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// startPostgres runs a throwaway PostgreSQL cluster (Debian's binaries, as `make tools`
// installs them) for the iceberg catalog figures and returns its URI; stop removes it. It is
// internal/testutil/pgtest without a testing.TB, and keeps fsync on: a catalog commit's
// latency includes its WAL flush, as in production.
func startPostgres() (uri string, stop func(), err error) {
	m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(m) == 0 {
		return "", nil, fmt.Errorf("PostgreSQL is not installed (make tools)")
	}
	bin := filepath.Dir(m[len(m)-1])
	// A directory of its own under the temp dir: as root the cluster runs as postgres, which
	// cannot enter another bench's private home.
	dir, err := os.MkdirTemp("", "hyp-bench-pg-")
	if err != nil {
		return "", nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	var attr *syscall.SysProcAttr
	if os.Geteuid() == 0 {
		// PostgreSQL refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", nil, fmt.Errorf("running as root and no postgres user: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			return "", nil, err
		}
		attr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	run := func(name string, args ...string) error {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir, cmd.SysProcAttr = dir, attr
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w\n%s", name, err, out)
		}
		return nil
	}
	data := filepath.Join(dir, "data")
	if err := run("initdb", "-D", data, "-A", "trust", "-U", "postgres"); err != nil {
		return "", nil, err
	}
	_, port, err := net.SplitHostPort(freeAddr())
	if err != nil {
		return "", nil, err
	}
	if err := run("pg_ctl", "-D", data, "-w", "-l", filepath.Join(dir, "log"), "-o",
		fmt.Sprintf("-p %s -k %s -c listen_addresses=127.0.0.1", port, dir), "start"); err != nil {
		return "", nil, err
	}
	stop = func() {
		_ = run("pg_ctl", "-D", data, "-m", "fast", "stop")
		os.RemoveAll(dir)
	}
	return "postgres://postgres@127.0.0.1:" + port + "/postgres?sslmode=disable", stop, nil
}
