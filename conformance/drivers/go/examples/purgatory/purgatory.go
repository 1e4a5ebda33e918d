package main

import (
	"fmt"
	"hash/fnv"
	"sort"
	"sync"
	"sync/atomic"

	vectors "github.com/kpurgatory/kpurgatory/conformance/drivers/go"
)

// shards is how many watch lists the purgatory spreads its keys over (declared in the hello: not judged).
const shards = 8

// op is a delayed operation whose condition the harness controls: ready after readyOn tries, or as set_ready says.
type op struct {
	id        string
	delayMs   int64
	readyOn   *int64
	ready     *bool
	tries     int64
	completed atomic.Bool
	lock      *vectors.Mutex // guards tryComplete
	deadline  int64
	timed     bool // in the timer
}

// shard is one watch list's share of the keys.
type shard struct {
	lock  *vectors.Mutex
	byKey map[string][]*op
}

// purgatory is Kafka's DelayedOperationPurgatory (4.x) in small, on a virtual clock: try, watch every key, try again
// under the op lock; checks walk a key's list trying each op under its lock; expiry, force and the tries complete an
// op once (compare-and-set); a purge drops completed entries once more than purgeInterval ops left the timer.
type purgatory struct {
	mu            sync.Mutex // the op table, the timer and the estimate: held where no vectors.Mutex is taken
	ops           map[string]*op
	shards        [shards]*shard
	now           int64
	purgeInterval int64
	estimate      int64
	plant         string
}

// keep makes list, without the ops drop says to, the key's watch list (none when that leaves it empty), and says
// how many it dropped; the caller holds the shard's lock.
func (s *shard) keep(key string, list []*op, drop func(*op) bool) (dropped int64) {
	kept := []*op{}
	for _, o := range list {
		if drop(o) {
			dropped++
		} else {
			kept = append(kept, o)
		}
	}
	if len(kept) == 0 {
		delete(s.byKey, key)
	} else {
		s.byKey[key] = kept
	}
	return dropped
}

func (p *purgatory) Init(params vectors.Params) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ops, p.now, p.purgeInterval, p.estimate = map[string]*op{}, params.StartMs, params.PurgeInterval, 0
	for i := range p.shards {
		p.shards[i] = &shard{lock: vectors.NewMutex("watcher shard"), byKey: map[string][]*op{}}
	}
	return nil
}

func (p *purgatory) shardOf(key string) *shard {
	h := fnv.New32a()
	h.Write([]byte(key))
	return p.shards[h.Sum32()%shards]
}

// calls collects the events of one call, in the goroutine that makes it.
type calls struct{ events []vectors.Event }

// forceComplete completes o if nobody has yet: its timer entry is cancelled and the completion recorded, via route.
func (p *purgatory) forceComplete(o *op, via string, c *calls) bool {
	if !o.completed.CompareAndSwap(false, true) {
		return false
	}
	p.mu.Lock()
	o.timed = false
	p.mu.Unlock()
	c.events = append(c.events, vectors.CompleteEvent(o.id, via))
	return true
}

// tryComplete counts the try and completes o when its condition holds; the caller holds o's lock.
func (p *purgatory) tryComplete(o *op, via string, c *calls) bool {
	o.tries++
	holds := o.readyOn != nil && o.tries >= *o.readyOn
	if o.ready != nil {
		holds = *o.ready
	}
	return holds && p.forceComplete(o, via, c)
}

// safeTryComplete: under the op lock, a completed op is not tried again (KAFKA-17848).
func (p *purgatory) safeTryComplete(o *op, c *calls) bool {
	o.lock.Lock()
	defer o.lock.Unlock()
	return !o.completed.Load() && p.tryComplete(o, "check", c)
}

func (p *purgatory) Watch(id string, keys []string, delayMs int64, readyOn *int64) (bool, []vectors.Event, error) {
	if len(keys) == 0 {
		return false, nil, vectors.ErrEmptyKeys
	}
	p.mu.Lock()
	o := p.ops[id]
	if o == nil {
		o = &op{id: id, delayMs: delayMs, readyOn: readyOn, lock: vectors.NewMutex("op")}
		p.ops[id] = o
	}
	p.mu.Unlock()
	c := &calls{}
	o.lock.Lock()
	if p.tryComplete(o, "try", c) {
		o.lock.Unlock()
		return true, c.events, nil
	}
	for _, key := range keys {
		if o.completed.Load() { // KAFKA-18027
			break
		}
		s := p.shardOf(key)
		s.lock.Lock()
		s.byKey[key] = append(s.byKey[key], o)
		s.lock.Unlock()
	}
	p.mu.Lock()
	p.estimate++
	p.mu.Unlock()
	won := p.tryComplete(o, "try", c)
	o.lock.Unlock()
	if won {
		return true, c.events, nil
	}
	p.mu.Lock()
	due := false
	if !o.completed.Load() {
		o.deadline, o.timed = p.now+o.delayMs, true
		due = o.deadline <= p.now
	}
	p.mu.Unlock()
	if due && p.forceComplete(o, "expire", c) { // Kafka's timer runs an entry already due when it is added
		c.events = append(c.events, vectors.ExpireEvent(o.id))
	}
	return false, c.events, nil
}

func (p *purgatory) Check(key string) (int64, []vectors.Event, error) {
	s := p.shardOf(key)
	s.lock.Lock()
	list := append([]*op(nil), s.byKey[key]...)
	s.lock.Unlock()
	c := &calls{}
	var completed int64
	done := map[*op]bool{}
	for _, o := range list {
		if !o.completed.Load() && p.safeTryComplete(o, c) {
			completed++
		}
		if o.completed.Load() {
			done[o] = true
		}
	}
	s.lock.Lock()
	current := s.byKey[key]
	if p.plant == "check-rewrites-list" {
		current = list // the bug: what was watched on the key since the walk began is dropped
	}
	s.keep(key, current, func(o *op) bool { return done[o] })
	s.lock.Unlock()
	return completed, c.events, nil
}

func (p *purgatory) find(id string) (*op, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if o := p.ops[id]; o != nil {
		return o, nil
	}
	return nil, fmt.Errorf("no op %q was watched", id)
}

func (p *purgatory) SetReady(id string, ready bool) ([]vectors.Event, error) {
	o, err := p.find(id)
	if err != nil {
		return nil, err
	}
	o.lock.Lock()
	o.ready = &ready
	o.lock.Unlock()
	return nil, nil
}

func (p *purgatory) Force(id string) (bool, []vectors.Event, error) {
	o, err := p.find(id)
	if err != nil {
		return false, nil, err
	}
	c := &calls{}
	return p.forceComplete(o, "force", c), c.events, nil
}

func (p *purgatory) Try(id string) (bool, []vectors.Event, error) {
	o, err := p.find(id)
	if err != nil {
		return false, nil, err
	}
	c := &calls{}
	o.lock.Lock()
	defer o.lock.Unlock()
	return p.tryComplete(o, "try", c), c.events, nil
}

func (p *purgatory) Cancel(id string) ([]vectors.Event, error) {
	o, err := p.find(id)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	o.timed = false
	p.mu.Unlock()
	return nil, nil
}

func (p *purgatory) CancelKey(key string) ([]string, []vectors.Event, error) {
	s := p.shardOf(key)
	s.lock.Lock()
	list := s.byKey[key]
	delete(s.byKey, key)
	s.lock.Unlock()
	cancelled := []string{}
	p.mu.Lock()
	for _, o := range list {
		o.timed = false
		cancelled = append(cancelled, o.id)
	}
	p.mu.Unlock()
	return cancelled, nil, nil
}

// expire completes, in deadline order, every op in the timer whose deadline the clock reached.
func (p *purgatory) expire() []vectors.Event {
	p.mu.Lock()
	var due []*op
	for _, o := range p.ops {
		if o.timed && o.deadline <= p.now {
			due = append(due, o)
		}
	}
	p.mu.Unlock()
	sort.Slice(due, func(i, j int) bool {
		return due[i].deadline < due[j].deadline || due[i].deadline == due[j].deadline && due[i].id < due[j].id
	})
	expired := &calls{}
	for _, o := range due {
		if p.forceComplete(o, "expire", expired) {
			expired.events = append(expired.events, vectors.ExpireEvent(o.id))
		}
	}
	return expired.events
}

func (p *purgatory) Advance(toMs int64) ([]vectors.Event, error) {
	p.mu.Lock()
	if toMs > p.now {
		p.now = toMs
	}
	p.mu.Unlock()
	c := &calls{events: p.expire()}
	delayed, _ := p.Delayed()
	p.mu.Lock()
	purge := p.estimate-delayed > p.purgeInterval
	if purge {
		p.estimate = delayed
	}
	p.mu.Unlock()
	if purge {
		c.events = append(c.events, vectors.PurgeEvent(p.purge()))
	}
	return c.events, nil
}

// purge drops the completed entries of every watch list, and the lists it empties.
func (p *purgatory) purge() (purged int64) {
	for _, s := range p.shards {
		s.lock.Lock()
		for key, list := range s.byKey {
			purged += s.keep(key, list, func(o *op) bool { return o.completed.Load() })
		}
		s.lock.Unlock()
	}
	return purged
}

func (p *purgatory) Watched() (n int64, _ error) {
	for _, s := range p.shards {
		s.lock.Lock()
		for _, list := range s.byKey {
			n += int64(len(list))
		}
		s.lock.Unlock()
	}
	return n, nil
}

func (p *purgatory) Delayed() (n int64, _ error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, o := range p.ops {
		if o.timed {
			n++
		}
	}
	return n, nil
}

func (p *purgatory) Size() (int64, error) { return p.Delayed() }

func (p *purgatory) Shutdown() ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pending := []string{}
	for _, o := range p.ops {
		if o.timed {
			pending = append(pending, o.id)
			o.timed = false
		}
	}
	sort.Strings(pending)
	return pending, nil
}
