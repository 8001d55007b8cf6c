// Package listening tells whether a process is the one listening on an address, for tests
// and benchmarks that start hyp on a port they picked: a port free when they looked can be
// taken by another process before hyp binds it, hyp then exits, and whoever holds the port
// answers the health check in its place. It reads /proc (Linux) and never changes anything.
package listening

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// On reports whether process pid has a socket listening on addr (host:port, IPv4): a LISTEN
// row of /proc/net/tcp for the port whose inode is one of the process's open files.
func On(pid int, addr string) bool {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return false
	}
	b, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return false
	}
	inodes := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n")[1:] {
		f := strings.Fields(line)
		// sl local_address rem_address st ... inode: st 0A is LISTEN.
		if len(f) > 9 && f[3] == "0A" && strings.HasSuffix(f[1], fmt.Sprintf(":%04X", n)) {
			inodes["socket:["+f[9]+"]"] = true
		}
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if target, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[target] {
			return true
		}
	}
	return false
}
