// Package gozero binds go-zero's TimingWheel (github.com/zeromicro/go-zero/core/collection) to the vector driver on a
// virtual clock: the wheel takes its ticks from the library's own timex.FakeTicker, which the binding ticks by hand,
// one tick per tick_ms of virtual time since start_ms. Nothing sleeps; nothing reads the wall clock.
package gozero

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/zeromicro/go-zero/core/collection"
	"github.com/zeromicro/go-zero/core/timex"

	vectors "github.com/kpurgatory/kpurgatory/conformance/drivers/go"
)

// A wheel runs a tick's tasks on a goroutine of its own, in slot order; a marker entry added just before each tick
// is the last of its slot, so when it runs, every task of that tick has run.
type marker struct{}

const (
	// MaxSlots bounds wheel_size: the wheel allocates a list per slot up front.
	MaxSlots = 1 << 16
	// MaxTicks bounds the ticks one advance delivers while tasks are pending (an idle wheel skips to its slot).
	MaxTicks = 1 << 18
	maxMs    = math.MaxInt64 / int64(time.Millisecond)
	// markerWait bounds the wait for a tick's marker: reached only if the wheel loses an entry.
	markerWait = 10 * time.Second
)

// Wheel is the driver's Timer over a go-zero TimingWheel with an interval of tick_ms milliseconds, as its users
// configure it: delays are time.Duration, so one beyond 2^63−1 ns (about 292 years) cannot be passed at all.
type Wheel struct {
	p      vectors.Params
	tw     *collection.TimingWheel
	ticker timex.FakeTicker
	ticked int64 // ticks delivered since Init
	marked chan struct{}

	mu   sync.Mutex
	ran  []string
	live map[string]bool // added and not yet seen to run or be removed: when empty, ticks can be skipped
}

// Binding is go-zero's TimingWheel with its declarations (README.md says where each comes from).
func Binding() vectors.Binding {
	return vectors.Binding{
		Name:  "go-zero core/collection.TimingWheel v1.10.3 (virtual FakeTicker)",
		Level: "contract",
		Declarations: vectors.Declarations{Firing: "min_one_tick", NegativeDelays: "rejected",
			BeyondMaxDeadline: "undefined"},
		Profiles:    []string{"timer"},
		Unsupported: []string{"size"},
		Accepts: func(_ string, p vectors.Params) string {
			if p.TickMs > maxMs {
				return fmt.Sprintf("tick_ms %d is not a time.Duration", p.TickMs)
			}
			if p.WheelSize > MaxSlots {
				return fmt.Sprintf("wheel_size %d: the binding allocates at most %d slots", p.WheelSize, MaxSlots)
			}
			return ""
		},
		System: vectors.TimerSystem(&Wheel{}),
	}
}

func (w *Wheel) Init(p vectors.Params) error {
	if w.tw != nil {
		w.tw.Stop()
	}
	w.p, w.ticked, w.ran, w.live = p, 0, nil, map[string]bool{}
	w.ticker, w.marked = timex.NewFakeTicker(), make(chan struct{})
	tw, err := collection.NewTimingWheelWithTicker(time.Duration(p.TickMs)*time.Millisecond, int(p.WheelSize),
		w.execute, w.ticker)
	w.tw = tw
	return err
}

func (w *Wheel) execute(key, _ any) {
	if key == (marker{}) {
		w.marked <- struct{}{}
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ran = append(w.ran, key.(string))
	delete(w.live, key.(string))
}

func (w *Wheel) Add(task string, delayMs int64) ([]string, error) {
	if delayMs > maxMs {
		return nil, fmt.Errorf("%w: delay_ms %d is beyond time.Duration", vectors.ErrCannotRun, delayMs)
	}
	// every negative delay meets the library's `delay <= 0` check alike; -1 keeps the product in range
	err := w.tw.SetTimer(task, nil, time.Duration(max(delayMs, -1))*time.Millisecond)
	if errors.Is(err, collection.ErrArgument) {
		return nil, fmt.Errorf("%w: %v", vectors.ErrDelayOutOfRange, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.live[task] = true
	return nil, err
}

func (w *Wheel) Cancel(task string) ([]string, error) {
	w.mu.Lock()
	delete(w.live, task)
	w.mu.Unlock()
	return nil, w.tw.RemoveTimer(task)
}

// Advance delivers the ticks due by toMs, the k-th at start_ms + k·tick_ms, as a real ticker started at start_ms would.
func (w *Wheel) Advance(toMs int64) ([]string, error) {
	target := (toMs - w.p.StartMs) / w.p.TickMs
	for delivered := 0; w.ticked < target; delivered++ {
		w.mu.Lock()
		idle := len(w.live) == 0
		w.mu.Unlock()
		if idle { // only the slot position matters: turn the wheel by what is left of a round
			for n := (target - w.ticked) % w.p.WheelSize; n > 0; n-- {
				if err := w.tick(); err != nil {
					return w.take(), err
				}
			}
			w.ticked = target
			break
		}
		if delivered == MaxTicks {
			return w.take(), fmt.Errorf("%w: the advance to %d needs %d more ticks with tasks pending (at most %d)",
				vectors.ErrCannotRun, toMs, target-w.ticked, MaxTicks)
		}
		if err := w.tick(); err != nil {
			return w.take(), err
		}
		w.ticked++
	}
	return w.take(), nil
}

func (w *Wheel) tick() error {
	if err := w.tw.SetTimer(marker{}, nil, time.Duration(w.p.TickMs)*time.Millisecond); err != nil {
		return err
	}
	w.ticker.Tick()
	select {
	case <-w.marked:
		return nil
	case <-time.After(markerWait):
		return errors.New("the wheel did not run the tick's marker entry")
	}
}

func (w *Wheel) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ran := w.ran
	w.ran = nil
	return ran
}

// Size: the wheel has no count of its entries.
func (w *Wheel) Size() (int64, error) {
	return 0, errors.New("go-zero's TimingWheel has no size")
}

// Shutdown reports the entries Drain hands over (every one not removed), instead of running them, and stops.
func (w *Wheel) Shutdown() ([]string, error) {
	var mu sync.Mutex
	pending := []string{}
	err := w.tw.Drain(func(key, _ any) {
		mu.Lock()
		defer mu.Unlock()
		pending = append(pending, key.(string))
	})
	if err == nil { // Drain returns once the wheel's loop took the request; the next request waits for it to finish
		err = w.tw.RemoveTimer(marker{})
	}
	w.tw.Stop()
	w.tw = nil
	slices.Sort(pending)
	return pending, err
}
