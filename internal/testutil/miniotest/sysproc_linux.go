package miniotest

import "syscall"

// sysProcAttr kills MinIO when the test binary dies without running its cleanups (a panic
// or `go test -timeout`), so no server outlives the run that started it.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
