package vectors

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
)

// Mutex is a sync.Mutex that a controlled scheduler sees (specs/protocol.md §3.4, the feature `scheduler`): build
// your implementation's locks with NewMutex where Serve serves it (an adapter made with stdio.Serve) and
// `kpurgatory check --threads N --scheduler random|pct` chooses every switch between its goroutines, so that a seed
// or a recorded schedule replays an interleaving exactly. Within a scheduled request Lock and TryLock are points:
// the goroutine says where it is (the lock's role and the function that takes it) and waits for the harness's go;
// finding the lock held, it says so and waits for the next go; Unlock says the lock is free. Outside a scheduled
// request it is a plain sync.Mutex.
//
// Go has no goroutine-local state, so a Mutex knows a scheduled goroutine by the turn the harness gave: exactly one
// scheduled goroutine runs at a time. Goroutines of your own that take these locks while a scheduled run is in
// flight (a reaper on a real clock) would be taken for it: a binding served for scheduling runs on a virtual clock.
type Mutex struct {
	mu   sync.Mutex
	id   int64
	role string
}

var lockIDs atomic.Int64

// NewMutex makes a Mutex; role names the lock in the scheduler's lines ("op", "watcher shard", …).
func NewMutex(role string) *Mutex { return &Mutex{id: lockIDs.Add(1), role: role} }

// Lock is sync.Mutex's, with a point before it and a wait line for each go that finds the lock held.
func (m *Mutex) Lock() {
	t := turns.running()
	if t == nil {
		m.mu.Lock()
		return
	}
	t.point("acquire", m.role)
	for !m.mu.TryLock() {
		t.wait(m.id, m.role)
	}
}

// TryLock is sync.Mutex's, with a point before it.
func (m *Mutex) TryLock() bool {
	if t := turns.running(); t != nil {
		t.point("try", m.role)
	}
	return m.mu.TryLock()
}

// Unlock is sync.Mutex's; within a scheduled request it says that the lock is free.
func (m *Mutex) Unlock() {
	m.mu.Unlock()
	if t := turns.running(); t != nil {
		t.say(map[string]any{"sched": "released", "lock": m.id, "role": m.role})
	}
}

// turns is Serve's side of the scheduler: the scheduled requests in flight and the one whose goroutine runs.
var turns = &turnTable{bySeq: map[string]*turn{}}

type turnTable struct {
	mu      sync.Mutex
	bySeq   map[string]*turn
	current *turn
	write   func(map[string]any)
}

// turn is one scheduled request: its goroutine runs only between a go and its next line.
type turn struct {
	seq  json.Number
	goes chan bool // a go; true: a deadlock's
}

func (ts *turnTable) running() *turn {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.current
}

// begin registers a scheduled request, whose goroutine runs at once: the harness sent it in that goroutine's turn.
func (ts *turnTable) begin(seq json.Number) *turn {
	t := &turn{seq: seq, goes: make(chan bool, 1)}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	ts.bySeq[seq.String()] = t
	ts.current = t
	return t
}

// end hands the turn back before the request's answer is written.
func (ts *turnTable) end(t *turn) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	delete(ts.bySeq, t.seq.String())
	if ts.current == t {
		ts.current = nil
	}
}

// give is the harness's go for request seq (read by Serve's loop).
func (ts *turnTable) give(seq json.Number, deadlock bool) error {
	ts.mu.Lock()
	t := ts.bySeq[seq.String()]
	ts.mu.Unlock()
	if t == nil {
		return fmt.Errorf("go: no scheduled request %s waits", seq)
	}
	t.goes <- deadlock
	return nil
}

// say writes one of the request's scheduler lines.
func (t *turn) say(line map[string]any) {
	line["seq"] = t.seq
	turns.write(line)
}

// yield writes a line that hands the turn back, then waits for the next go; it reports whether that go said
// deadlock.
func (t *turn) yield(line map[string]any) bool {
	turns.mu.Lock()
	turns.current = nil
	turns.mu.Unlock()
	t.say(line)
	deadlock := <-t.goes
	turns.mu.Lock()
	turns.current = t
	turns.mu.Unlock()
	return deadlock
}

func (t *turn) point(kind, role string) {
	t.yield(map[string]any{"sched": "point", "kind": kind, "where": role + " in " + caller()})
}

func (t *turn) wait(lock int64, role string) {
	if t.yield(map[string]any{"sched": "wait", "lock": lock, "role": role}) {
		panic(fmt.Sprintf("deadlock: every scheduled goroutine left waits for a lock another holds (this one: %s)",
			role))
	}
}

// caller names the function that takes the lock: the first frame outside this file, without its package path,
// receiver and closures ("Check" for "example.com/p.(*Purgatory).Check.func1").
func caller() string {
	pcs := make([]uintptr, 16)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		frame, more := frames.Next()
		if !strings.HasSuffix(frame.File, "/sched.go") || !strings.HasPrefix(frame.Function, packagePath+".") {
			parts := strings.Split(frame.Function[strings.LastIndex(frame.Function, "/")+1:], ".")
			for len(parts) > 1 && strings.HasPrefix(parts[len(parts)-1], "func") {
				parts = parts[:len(parts)-1]
			}
			return parts[len(parts)-1]
		}
		if !more {
			return "?"
		}
	}
}

// packagePath is this package's import path, as the runtime spells it in a function's name.
var packagePath = reflect.TypeOf(turn{}).PkgPath()
