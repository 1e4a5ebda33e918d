module kpurgatory/examples/gozero

go 1.24.0

require (
	github.com/kpurgatory/kpurgatory/conformance/drivers/go v0.1.0
	github.com/zeromicro/go-zero v1.10.3
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/fatih/color v1.18.0 // indirect
	github.com/mattn/go-colorable v0.1.13 // indirect
	github.com/mattn/go-isatty v0.0.20 // indirect
	github.com/spaolacci/murmur3 v1.1.0 // indirect
	go.opentelemetry.io/otel v1.40.0 // indirect
	go.opentelemetry.io/otel/trace v1.40.0 // indirect
	go.uber.org/automaxprocs v1.6.0 // indirect
	golang.org/x/sys v0.41.0 // indirect
)

replace github.com/kpurgatory/kpurgatory/conformance/drivers/go => ../../drivers/go
