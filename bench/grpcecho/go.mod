module twingress.local/bench/grpcecho

go 1.24
