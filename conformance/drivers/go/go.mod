module github.com/kpurgatory/kpurgatory/conformance/drivers/go

go 1.22
