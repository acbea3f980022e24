package main

import "syscall"

const (
	sysRecvmmsg = syscall.SYS_RECVMMSG
	sysSendmmsg = syscall.SYS_SENDMMSG
)
