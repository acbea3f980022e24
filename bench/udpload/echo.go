package main

import (
	"syscall"
	"unsafe"
)

// batch is how many datagrams one recvmmsg/sendmmsg moves.
const batch = 64

// msgWaitForOne makes recvmmsg return as soon as one datagram is there (the syscall package
// defines it for a few architectures only).
const msgWaitForOne = 0x10000

// mmsghdr is struct mmsghdr on 64-bit Linux: a msghdr and the byte count the kernel fills in.
type mmsghdr struct {
	hdr syscall.Msghdr
	len uint32
	_   [4]byte
}

// echo answers every datagram on 127.0.0.1:port to its sender, a batch per system call pair so
// that the echo costs the load CPU as little as possible. It returns only on an error.
func echo(port int) int {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return fail("socket", err)
	}
	_ = syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<20)
	if err := syscall.Bind(fd, loopback(port)); err != nil {
		return fail("bind", err)
	}
	bufs := make([][maxDatagram]byte, batch)
	iov := make([]syscall.Iovec, batch)
	peers := make([]syscall.RawSockaddrInet4, batch)
	msgs := make([]mmsghdr, batch)
	for {
		for i := range msgs {
			iov[i] = syscall.Iovec{Base: &bufs[i][0]}
			iov[i].SetLen(maxDatagram)
			msgs[i] = mmsghdr{}
			msgs[i].hdr.Iov = &iov[i]
			msgs[i].hdr.Iovlen = 1
			msgs[i].hdr.Name = (*byte)(unsafe.Pointer(&peers[i]))
			msgs[i].hdr.Namelen = syscall.SizeofSockaddrInet4
		}
		n, _, errno := syscall.Syscall6(sysRecvmmsg, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), batch,
			msgWaitForOne, 0, 0)
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return fail("recvmmsg", errno)
		}
		for i := 0; i < int(n); i++ {
			iov[i].SetLen(int(msgs[i].len))
		}
		// A full buffer drops answers, as the network would.
		syscall.Syscall6(sysSendmmsg, uintptr(fd), uintptr(unsafe.Pointer(&msgs[0])), n, 0, 0, 0)
	}
}
