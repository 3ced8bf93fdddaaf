module brevis

go 1.19
