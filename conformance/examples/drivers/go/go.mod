module kpurgatory/driver

go 1.22
