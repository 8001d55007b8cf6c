package lake

import (
	"context"
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

// startPostgres runs a throwaway PostgreSQL cluster on 127.0.0.1 for the test and returns
// its URI. PostgreSQL refuses to run as root, so as root the cluster runs as the postgres
// user. A missing PostgreSQL fails the test: it is part of the test environment.
func startPostgres(t *testing.T) string {
	t.Helper()
	bin := ""
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb"); len(m) > 0 {
		bin = filepath.Dir(m[len(m)-1])
	} else if p, err := exec.LookPath("initdb"); err == nil {
		bin = filepath.Dir(p)
	} else {
		t.Fatal("PostgreSQL is not installed (apt-get install -y postgresql)")
	}
	dir, err := os.MkdirTemp("", "hyp-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	// As root, the cluster's commands run as the postgres user the package creates; the
	// credential is set on the process itself, so no runuser or su needs to be on PATH.
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("PostgreSQL refuses to run as root, and there is no postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir
		if cred != nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	data := filepath.Join(dir, "data")
	run("initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	run("pg_ctl", "-D", data, "-w", "-l", filepath.Join(dir, "log"), "-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", port, dir), "start")
	t.Cleanup(func() { run("pg_ctl", "-D", data, "-m", "immediate", "stop") })
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(port) + "/postgres?sslmode=disable"
}

func TestPostgresCatalog(t *testing.T) {
	ctx := context.Background()
	uri := startPostgres(t)
	o := Options{Catalog: "sql", URI: uri, Warehouse: filepath.Join(t.TempDir(), "warehouse"), Namespace: "hyp", PartitionBy: "day", Gateway: "gw-a"}
	a, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	o.Gateway = "gw-b"
	b, err := Open(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Each unit is committed twice: the repeat, a retry after a crash, must add nothing.
	commitConcurrently(t, a, b, 6, 4, true)
}
