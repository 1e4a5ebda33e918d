package vectors

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// Params are a case's init (the trace header's params).
type Params struct {
	TickMs        int64 `json:"tick_ms"`
	WheelSize     int64 `json:"wheel_size"`
	StartMs       int64 `json:"start_ms"`
	PurgeInterval int64 `json:"purge_interval"`
}

// Event is one event of the protocol ({"event": "run", "task": "a"}, ...); numbers are json.Number or int64.
type Event = map[string]any

// Observation is what a system answered to one command (specs/protocol.md §6).
type Observation struct {
	Result any     `json:"result"`
	Events []Event `json:"events"`
	Error  string  `json:"error,omitempty"`
}

// System is what the driver drives: Init starts a fresh run, Step executes one command of the protocol. An error
// from either means the system could not answer at all (the protocol's failure), not an observable error.
type System interface {
	Init(profile string, p Params) error
	Step(cmd string, args map[string]any) (Observation, error)
}

// The observable errors: return them (or wrap them) from Timer and Purgatory methods.
var (
	ErrDelayOutOfRange = errors.New("delay_out_of_range")
	ErrEmptyKeys       = errors.New("empty_keys")
)

// How a call failed to answer, besides an error of its own (specs/vectors.md §4): it hung (no answer within
// CallTimeout) or it crashed (took its process down). Wrapped, with what is known, they are the step's failure text.
var (
	ErrHung    = errors.New("hung")
	ErrCrashed = errors.New("crashed")
)

// CallTimeout is how long a call may take: KPURGATORY_VECTORS_CALL_TIMEOUT_MS, 10 s by default.
func CallTimeout() time.Duration {
	if ms, err := strconv.ParseInt(os.Getenv("KPURGATORY_VECTORS_CALL_TIMEOUT_MS"), 10, 64); err == nil && ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return 10 * time.Second
}

// OutOfProcess is a System whose implementation runs in a process of its own and bounds its calls itself (the stdio
// adapter: it kills and restarts a hung or dead adapter). The driver calls it from the test's process; any other
// System runs in a child process of the test, where a crash or a hang ends only that child (supervise.go).
type OutOfProcess interface {
	System
	OutOfProcess()
}

// ErrCannotRun (wrapped, with the reason) from any call says the binding cannot carry out this case, e.g. an
// advance beyond what it can drive: the case is skipped with that reason, judged up to there.
var ErrCannotRun = errors.New("the binding cannot run this case")

// Timer is the timer profile: tasks run during a call are returned by it, in the order they ran.
type Timer interface {
	Init(p Params) error
	Add(task string, delayMs int64) (ran []string, err error)
	Cancel(task string) (ran []string, err error)
	Advance(toMs int64) (ran []string, err error)
	Size() (int64, error)
}

// Shutdowner is optional for a Timer or Purgatory: stop, and report the ids still pending (dropped, not run).
type Shutdowner interface {
	Shutdown() (pending []string, err error)
}

// ReadOuts is optional: the read-outs of specs/protocol.md §8 (wheel, delay_queue, watcher_keys) a binding declares.
type ReadOuts interface {
	ReadOut(name string) (any, error)
}

// Purgatory is the purgatory profile; every call returns the events it caused, in order.
type Purgatory interface {
	Init(p Params) error
	Watch(op string, keys []string, delayMs int64, readyOn *int64) (bool, []Event, error)
	SetReady(op string, ready bool) ([]Event, error)
	Check(key string) (int64, []Event, error)
	CancelKey(key string) ([]string, []Event, error)
	Force(op string) (bool, []Event, error)
	Try(op string) (bool, []Event, error)
	Cancel(op string) ([]Event, error)
	Advance(toMs int64) ([]Event, error)
	Watched() (int64, error)
	Delayed() (int64, error)
	Size() (int64, error)
	Shutdown() ([]string, error)
}

// RunEvent, CompleteEvent, ExpireEvent and PurgeEvent build the protocol's events.
func RunEvent(task string) Event         { return Event{"event": "run", "task": task} }
func CompleteEvent(op, via string) Event { return Event{"event": "complete", "op": op, "via": via} }
func ExpireEvent(op string) Event        { return Event{"event": "expire", "op": op} }
func PurgeEvent(count int64) Event       { return Event{"event": "purge", "count": count} }
func runs(tasks []string) (out []Event) {
	for _, t := range tasks {
		out = append(out, RunEvent(t))
	}
	return out
}

// TimerSystem drives a Timer as a System.
func TimerSystem(t Timer) System { return timerSystem{t} }

type timerSystem struct{ t Timer }

func (s timerSystem) Init(_ string, p Params) error { return s.t.Init(p) }

func (s timerSystem) Step(cmd string, a map[string]any) (Observation, error) {
	var ran []string
	var result any
	var err error
	switch cmd {
	case "timer_add":
		ran, err = s.t.Add(str(a, "task"), num(a, "delay_ms"))
	case "timer_cancel":
		ran, err = s.t.Cancel(str(a, "task"))
	case "advance":
		ran, err = s.t.Advance(num(a, "to_ms"))
	case "size":
		result, err = s.t.Size()
	case "shutdown":
		result, err = shutdown(s.t)
	default:
		result, err = readOut(s.t, cmd)
	}
	return observe(result, runs(ran), err)
}

// PurgatorySystem drives a Purgatory as a System.
func PurgatorySystem(p Purgatory) System { return purgatorySystem{p} }

type purgatorySystem struct{ p Purgatory }

func (s purgatorySystem) Init(_ string, p Params) error { return s.p.Init(p) }

func (s purgatorySystem) Step(cmd string, a map[string]any) (Observation, error) {
	var result any
	var events []Event
	var err error
	switch cmd {
	case "watch":
		var readyOn *int64
		if r, ok := a["ready_on"].(json.Number); ok {
			n, _ := r.Int64()
			readyOn = &n
		}
		result, events, err = s.p.Watch(str(a, "op"), strs(a, "keys"), num(a, "delay_ms"), readyOn)
	case "set_ready":
		ready, ok := a["ready"].(bool)
		events, err = s.p.SetReady(str(a, "op"), ready || !ok)
	case "check":
		result, events, err = s.p.Check(str(a, "key"))
	case "cancel_key":
		result, events, err = s.p.CancelKey(str(a, "key"))
	case "force":
		result, events, err = s.p.Force(str(a, "op"))
	case "try":
		result, events, err = s.p.Try(str(a, "op"))
	case "cancel":
		events, err = s.p.Cancel(str(a, "op"))
	case "advance":
		events, err = s.p.Advance(num(a, "to_ms"))
	case "watched":
		result, err = s.p.Watched()
	case "delayed":
		result, err = s.p.Delayed()
	case "size":
		result, err = s.p.Size()
	case "shutdown":
		result, err = ids(s.p.Shutdown())
	default:
		result, err = readOut(s.p, cmd)
	}
	return observe(result, events, err)
}

// observe turns a typed answer into an Observation: the observable errors become error codes.
func observe(result any, events []Event, err error) (Observation, error) {
	switch {
	case errors.Is(err, ErrDelayOutOfRange):
		return Observation{Events: events, Error: ErrDelayOutOfRange.Error()}, nil
	case errors.Is(err, ErrEmptyKeys):
		return Observation{Events: events, Error: ErrEmptyKeys.Error()}, nil
	case err != nil:
		return Observation{}, err
	}
	return Observation{Result: result, Events: events}, nil
}

func shutdown(system any) (any, error) {
	if s, ok := system.(Shutdowner); ok {
		return ids(s.Shutdown())
	}
	return nil, errors.New("shutdown: not implemented (declare it unsupported)")
}

// ids is a list of ids as the protocol writes it: [] for none (a nil slice would be null).
func ids(pending []string, err error) (any, error) {
	if pending == nil {
		pending = []string{}
	}
	return pending, err
}

func readOut(system any, cmd string) (any, error) {
	if r, ok := system.(ReadOuts); ok {
		return r.ReadOut(cmd)
	}
	return nil, fmt.Errorf("%s: not implemented (declare it unsupported)", cmd)
}

func str(a map[string]any, k string) string { s, _ := a[k].(string); return s }

func num(a map[string]any, k string) int64 {
	n, _ := a[k].(json.Number).Int64()
	return n
}

func strs(a map[string]any, k string) (out []string) {
	for _, s := range a[k].([]any) {
		out = append(out, s.(string))
	}
	return out
}

// Close closes a System that holds resources (a subprocess, goroutines).
func Close(s System) error {
	if c, ok := s.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
