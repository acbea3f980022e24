// Command pause is the sandbox ("pause") container of the test node: it holds a pod's
// namespaces open and does nothing else. As PID 1 of the pod's PID namespace (when the pod
// shares one) it reaps the orphans that get reparented to it. It exits 0 on SIGTERM or SIGINT,
// which is how the runtime stops a sandbox.
//
// Our own because no image registry is reachable from the test machine; the image is FROM scratch
// with this one static binary (see testenv/node.sh).
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		fmt.Println("twingress-pause")
		return
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every child that has exited (SIGCHLD coalesces, so loop until none is left).
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
