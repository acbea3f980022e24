module twingress.local/bench/udpload

go 1.22
