//go:build !linux

package miniotest

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; t.Cleanup is the only stop there.
func sysProcAttr() *syscall.SysProcAttr { return nil }
