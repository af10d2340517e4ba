//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// setProcessGroup runs cmd in a process group of its own: a terminal's Ctrl-C reaches only the
// worker, which drains, and a timeout can signal the command's children too.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

func terminateProcess(p *os.Process) error { return signalGroup(p, syscall.SIGTERM) }

func killProcess(p *os.Process) error { return signalGroup(p, syscall.SIGKILL) }

func signalGroup(p *os.Process, sig syscall.Signal) error {
	if err := syscall.Kill(-p.Pid, sig); err != nil {
		return p.Signal(sig)
	}
	return nil
}
