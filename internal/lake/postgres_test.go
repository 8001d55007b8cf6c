package lake

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
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
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(filepath.Join(bin, name), args...)
		if os.Geteuid() == 0 {
			cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
	}
	if os.Geteuid() == 0 {
		if out, err := exec.Command("chown", "postgres:", dir).CombinedOutput(); err != nil {
			t.Fatalf("chown %s: %v %s", dir, err, out)
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
	const commits, rowsPer = 6, 4
	errs := make(chan error, 2)
	for i, l := range []*Lake{a, b} {
		go func() {
			part := fmt.Sprintf("source=m%d", i)
			for j := range commits {
				c := commitOf(l.gw, batch(t, part, int64(j*rowsPer+1), rowsPer, arrow.PrimitiveTypes.Int64))
				if _, err := l.Commit(ctx, c); err != nil {
					errs <- fmt.Errorf("%s commit %d: %w", l.gw, j, err)
					return
				}
				// Committing the same units again (a retry after a crash) adds nothing.
				if r, err := l.Commit(ctx, c); err != nil || !r.Already {
					errs <- fmt.Errorf("%s repeated commit %d = %+v, %v; want Already", l.gw, j, r, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	files, rows := liveFiles(t, a)
	if rows != 2*commits*rowsPer {
		t.Errorf("rows = %d, want %d", rows, 2*commits*rowsPer)
	}
	for f, n := range files {
		if n != 1 {
			t.Errorf("%s referenced %d times", f, n)
		}
	}
}
