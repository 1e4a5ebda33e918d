package gozero

import (
	"testing"

	vectors "github.com/kpurgatory/kpurgatory/conformance/drivers/go"
)

func TestVectors(t *testing.T) {
	b := Binding()
	vectors.Run(t, b)
}
