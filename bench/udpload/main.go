// Command udpload is the UDP load for python -m bench streams (bench/scenarios/streams.py): an echo server and a closed-loop
// load generator, in Go (standard library only) so that the load side (one core) outruns any
// proxy under test.
//
//	udp_load echo PORT
//	    answers every datagram on 127.0.0.1:PORT to its sender (recvmmsg/sendmmsg).
//	udp_load load PORT CLIENTS WINDOW SIZE SECONDS
//	    CLIENTS sockets connected to 127.0.0.1:PORT, each keeping WINDOW datagrams of
//	    SIZE bytes in flight: every answer sends the next one. A socket that got no
//	    answer for 20 ms is topped up with a new window (datagrams lost under overload
//	    must not stall it). Prints one line: "packets SECONDS_MEASURED ANSWERS LOST_REFILLS".
//
// Built by the benchmark with `go build` into its temp dir; not part of twingress. Both modes
// are one goroutine making raw system calls (epoll and recvmmsg, like the C tool this replaced):
// the Go runtime's netpoller and a goroutine per socket would cost a scheduler round trip per
// datagram, and the generator must not be what a benchmark measures.
package main

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

const usage = "usage: udp_load echo PORT | udp_load load PORT CLIENTS WINDOW SIZE SECONDS"

// maxDatagram bounds what is sent and read, as the C tool's 2048-byte buffers did.
const maxDatagram = 2048

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	if len(args) == 2 && args[0] == "echo" {
		if port, ok := ints(args[1:]); ok {
			return echo(port[0])
		}
	}
	if len(args) == 6 && args[0] == "load" {
		n, ok := ints(args[1:5])
		seconds, err := strconv.ParseFloat(args[5], 64)
		if ok && err == nil && n[3] >= 0 && n[3] <= maxDatagram {
			return load(n[0], n[1], n[2], n[3], seconds)
		}
	}
	fmt.Fprintln(os.Stderr, usage)
	return 2
}

// ints parses every argument as a decimal integer; ok is false if any is not one.
func ints(args []string) ([]int, bool) {
	out := make([]int, len(args))
	for i, a := range args {
		v, err := strconv.Atoi(a)
		if err != nil {
			return nil, false
		}
		out[i] = v
	}
	return out, true
}

// loopback is 127.0.0.1:port.
func loopback(port int) *syscall.SockaddrInet4 {
	return &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}
}

// fail prints what failed, like perror, and gives the exit status.
func fail(what string, err error) int {
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	return 1
}
