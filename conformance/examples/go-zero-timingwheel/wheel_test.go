package gozero

import (
	"testing"

	"kpurgatory/driver"
)

func TestVectors(t *testing.T) {
	b := Binding()
	driver.Run(t, b)
}
