package main

// The syscall package lacks SYS_SENDMMSG on amd64.
const (
	sysRecvmmsg = 299
	sysSendmmsg = 307
)
