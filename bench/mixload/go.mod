module twingress.local/bench/mixload

go 1.26
