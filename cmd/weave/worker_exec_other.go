//go:build !unix

package main

import (
	"os"
	"os/exec"
)

func setProcessGroup(*exec.Cmd) {}

// terminateProcess kills the process: there is no portable SIGTERM outside Unix.
func terminateProcess(p *os.Process) error { return p.Kill() }

func killProcess(p *os.Process) error { return p.Kill() }
