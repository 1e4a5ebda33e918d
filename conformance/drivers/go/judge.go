package vectors

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
)

// judge compares one answer with a case's step: the problem ("" when none). undefined says a step is an input the declarations leave undefined: it is not sent, and the judging
// of the case ends before it.
type judge interface {
	undefined(s *step) bool
	step(s *step, got Observation) (problem string)
}

// exact: the model's result and error, and its events as a sequence of groups, any order within a group.
type exact struct{}

func (exact) undefined(*step) bool { return false }

func (exact) step(s *step, got Observation) string {
	if got.Error != s.Error {
		return fmt.Sprintf("error %q, expected %q", got.Error, s.Error)
	}
	if canonical(got.Result) != canonical(s.Result) {
		return fmt.Sprintf("result %s, expected %s", canonical(got.Result), canonical(s.Result))
	}
	groups := s.Expect.Groups
	if groups == nil && len(s.Events) > 0 {
		groups = []int{len(s.Events)}
	}
	if len(got.Events) != len(s.Events) {
		return fmt.Sprintf("%d events, expected %d", len(got.Events), len(s.Events))
	}
	at := 0
	for g, size := range groups {
		want, have := texts(s.Events[at:at+size]), texts(got.Events[at:at+size])
		if !slices.Equal(want, have) {
			return fmt.Sprintf("events %d..%d (group %d of %d, any order within it) are %v, expected %v",
				at, at+size-1, g+1, len(groups), have, want)
		}
		at += size
	}
	return ""
}

func texts(events []Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = canonical(e)
	}
	sort.Strings(out)
	return out
}

// contract: the contract level (specs/vectors.md §5.2, §5.3), a tracker of what is pending in the timer with each
// entry's firing window, and in a purgatory of each op's condition and the watch lists' entries. A problem names
// the property it breaks, as model/contract.py does.
type contract struct {
	d        Declarations
	firing   string
	profile  string
	now      int64
	pending  map[string]window // task or op -> the firing window [lo, hi] of its last scheduling
	departed []string          // entries that left the timer since the last advance (what lazy_size may count)
	ops      map[string]*op
	live     map[string]map[string]int // key -> op -> entries of ops not completed
	stale    map[string]map[string]int // key -> op -> entries of completed ops a purgatory may still list
}

type op struct {
	delay     int64
	readyOn   bool  // the first watch carried a ready_on
	ready     *bool // the last set_ready, if any
	completed bool
}

// mayHold says whether the op's condition may hold, so that a try or a check may complete it.
func (o *op) mayHold() bool {
	if o.ready != nil {
		return *o.ready
	}
	return o.readyOn
}

// unknownWindow is a timer entry's window in a tree older than windows on every watch: never early, never late.
var unknownWindow = window{lo: math.MinInt64}

func newContract(d Declarations, profile string, p Params) *contract {
	return &contract{d: d, firing: or(d.Firing, "kafka"), profile: profile, now: p.StartMs,
		pending: map[string]window{}, ops: map[string]*op{}, live: map[string]map[string]int{},
		stale: map[string]map[string]int{}}
}

func (c *contract) undefined(s *step) bool {
	switch s.Cmd {
	case "timer_add":
		return c.treatment(s, num(s.Args, "delay_ms")) == "undefined"
	case "watch":
		return len(strs(s.Args, "keys")) > 0 && c.treatment(s, c.op(s).delay) == "undefined"
	}
	return false
}

// op is the op the step names, created at its first sight (a watch's delay_ms and ready_on are its own).
func (c *contract) op(s *step) *op {
	id := str(s.Args, "op")
	o := c.ops[id]
	if o == nil {
		_, delayed := s.Args["delay_ms"]
		o = &op{readyOn: s.Args["ready_on"] != nil}
		if delayed {
			o.delay = num(s.Args, "delay_ms")
		}
		c.ops[id] = o
	}
	return o
}

// treatment is how the declarations treat scheduling delay at this step: "accepted", "rejected" or "undefined".
func (c *contract) treatment(s *step, delay int64) string {
	at := s.Expect.DeadlineMs.ms
	if !s.Expect.DeadlineMs.set && (delay < 0 || c.now <= longMax-delay) {
		at = new(int64)
		*at = c.now + delay
	}
	limit := int64(longMax)
	if c.d.MaxDeadlineMs != nil {
		limit = *c.d.MaxDeadlineMs
	}
	if at == nil || *at > limit {
		return or(c.d.BeyondMaxDeadline, "rejected")
	}
	if delay < 0 {
		if n := or(c.d.NegativeDelays, "run_at_once"); n != "run_at_once" {
			return n
		}
	}
	return "accepted"
}

// domain judges a scheduling's answer against its treatment: "" and true when it was accepted.
func (c *contract) domain(s *step, delay int64, got Observation) (string, bool) {
	if c.treatment(s, delay) != "rejected" {
		return "", true
	}
	if got.Error != ErrDelayOutOfRange.Error() || len(got.Events) > 0 {
		return fmt.Sprintf("domain: the deadline is outside the declared domain: expected error delay_out_of_range "+
			"and no events, observed error %q and %d events", got.Error, len(got.Events)), false
	}
	return "", false
}

func (c *contract) step(s *step, got Observation) string {
	var problem string
	if c.profile == "purgatory" {
		problem = c.purgatory(s, got)
	} else {
		problem = c.timer(s, got)
	}
	if problem != "" {
		return problem
	}
	switch s.Cmd {
	case "advance":
		c.departed = nil
		var late []string
		for id, w := range c.pending {
			if w.lateAt(c.now) {
				late = append(late, fmt.Sprintf("%q (window %s)", id, w))
			}
		}
		if len(late) > 0 {
			sort.Strings(late)
			return fmt.Sprintf("on_time: still pending after advance to %d, past the end of their %s firing window: %v",
				c.now, c.firing, late)
		}
	case "size", "delayed":
		n, ok := integer(got.Result)
		lazy := 0
		if c.d.LazySize {
			lazy = len(c.departed)
		}
		if !ok || n < int64(len(c.pending)) || n > int64(len(c.pending)+lazy) {
			return fmt.Sprintf("counters: %s %s, expected %d pending (up to %d more with lazy_size)",
				s.Cmd, canonical(got.Result), len(c.pending), lazy)
		}
	case "shutdown":
		return c.shutdown(got.Result)
	}
	return ""
}

// timer judges a step of the timer profile.
func (c *contract) timer(s *step, got Observation) string {
	task := str(s.Args, "task")
	// with runs_due_on_update, a cancel or re-add of a due task may run its old entry inside the call
	due := false
	switch s.Cmd {
	case "timer_add":
		if problem, accepted := c.domain(s, num(s.Args, "delay_ms"), got); !accepted {
			return problem
		}
		due = c.due(task)
		c.schedule(task, s)
	case "timer_cancel":
		due = c.due(task)
		c.leave(task)
	case "advance":
		c.now = num(s.Args, "to_ms")
	}
	if got.Error != "" {
		return fmt.Sprintf("error %q; the contract expects none here", got.Error)
	}
	for _, e := range got.Events {
		ran, isRun := e["task"].(string)
		if e["event"] != "run" || !isRun || len(e) != 2 {
			return fmt.Sprintf("event %s: the timer profile has only {\"event\": \"run\", \"task\": ...}", canonical(e))
		}
		if due && ran == task {
			due = false // the old entry's run
			continue
		}
		w, ok := c.pending[ran]
		if !ok {
			return fmt.Sprintf("exactly_once: task %q ran at %d but is not pending (never added, already ran, or "+
				"cancelled)", ran, c.now)
		}
		if c.now < w.lo {
			return fmt.Sprintf("on_time: task %q ran at %d, early: its %s firing window is %s", ran, c.now,
				c.firing, w)
		}
		c.leave(ran)
	}
	switch s.Cmd {
	case "timer_add", "timer_cancel", "advance":
		if got.Result != nil {
			return fmt.Sprintf("result %s, expected null", canonical(got.Result))
		}
	}
	return ""
}

// due says whether the task is pending with its window open, when the binding may run it on an update.
func (c *contract) due(task string) bool {
	w, ok := c.pending[task]
	return c.d.RunsDueOnUpdate && ok && w.lo <= c.now
}

// schedule makes the entry pending with the window of the step's scheduling (leaving any earlier one).
func (c *contract) schedule(id string, s *step) {
	c.leave(id)
	w, ok := s.Expect.Windows[c.firing]
	if !ok {
		w = unknownWindow
	}
	c.pending[id] = w
}

func (c *contract) leave(id string) {
	if _, ok := c.pending[id]; ok {
		delete(c.pending, id)
		c.departed = append(c.departed, id)
	}
}

// purgatory judges a step of the purgatory profile.
func (c *contract) purgatory(s *step, got Observation) string {
	id, key := str(s.Args, "op"), str(s.Args, "key")
	var o *op
	if _, named := s.Args["op"]; named {
		o = c.op(s)
	}
	if s.Cmd == "watch" {
		keys := strs(s.Args, "keys")
		if len(keys) == 0 {
			if got.Error != ErrEmptyKeys.Error() || len(got.Events) > 0 {
				return fmt.Sprintf("domain: a watch without keys must answer the error empty_keys and no events, "+
					"observed error %q and %d events", got.Error, len(got.Events))
			}
			return ""
		}
		if problem, accepted := c.domain(s, o.delay, got); !accepted {
			return problem
		}
		if got.Error == "" {
			for _, k := range keys {
				if !o.completed {
					count(c.live, k, id, 1)
				} else if s.Expect.RelistCompleted {
					count(c.stale, k, id, 1)
				}
			}
			if !o.completed {
				c.schedule(id, s)
			}
		}
	}
	if got.Error != "" {
		return fmt.Sprintf("error %q; the contract expects none here", got.Error)
	}
	wasCompleted := o != nil && o.completed
	listed := maps.Clone(c.live[key])
	switch s.Cmd {
	case "set_ready":
		ready, ok := s.Args["ready"].(bool)
		ready = ready || !ok
		o.ready = &ready
	case "cancel_key":
		returned := map[string]int{}
		items, _ := got.Result.([]any)
		for _, item := range items {
			returned[fmt.Sprint(item)]++
		}
		for held, n := range listed {
			if returned[held] < n {
				return fmt.Sprintf("watcher_cleanup: cancel_key(%q) returned %v; the key's live entries are %v",
					key, canonical(got.Result), listed)
			}
		}
		for ret, n := range returned {
			if n > listed[ret]+c.stale[key][ret] {
				return fmt.Sprintf("watcher_cleanup: cancel_key(%q) returned %v; the key's entries are %v, plus "+
					"possibly %v completed ones", key, canonical(got.Result), listed, c.stale[key])
			}
		}
		delete(c.live, key)
		delete(c.stale, key)
		for held := range listed {
			c.leave(held)
		}
	case "cancel":
		c.leave(id)
	case "advance":
		c.now = num(s.Args, "to_ms")
	case "watched":
		live, stale := total(c.live), total(c.stale)
		if n, ok := integer(got.Result); !ok || n < live || n > live+stale {
			return fmt.Sprintf("watcher_cleanup: watched() = %s; expected between %d live entries and %d (with "+
				"completed entries not yet due for removal)", canonical(got.Result), live, live+stale)
		}
	}
	completed, problem := c.events(s, got)
	if problem != "" {
		return problem
	}
	switch s.Cmd {
	case "watch":
		return expectResult(s, got, slices.Contains(completed, [2]string{id, "try"}))
	case "check":
		var here []string
		for _, done := range completed {
			if done[1] == "check" {
				here = append(here, done[0])
			}
		}
		for candidate := range listed {
			if c.ops[candidate].ready != nil && *c.ops[candidate].ready && !slices.Contains(here, candidate) {
				return fmt.Sprintf("no_lost_wakeup: check(%q) did not complete %q, whose condition holds and which "+
					"is watched on that key", key, candidate)
			}
		}
		// the walk removes every completed entry it visits: an op listed n times keeps n - 1 of them
		delete(c.stale, key)
		for _, done := range here {
			if listed[done] > 1 {
				count(c.stale, key, done, listed[done]-1)
			}
		}
		return expectResult(s, got, len(here))
	case "force":
		return expectResult(s, got, !wasCompleted)
	case "try":
		here := slices.ContainsFunc(completed, func(done [2]string) bool { return done[0] == id })
		if o.ready != nil && *o.ready && !wasCompleted && !here {
			return fmt.Sprintf("no_lost_wakeup: try(%q) did not complete it although its condition holds", id)
		}
		return expectResult(s, got, here)
	}
	return ""
}

// events judges a purgatory command's events in order; it returns the completions, [op, via] each.
func (c *contract) events(s *step, got Observation) (completed [][2]string, problem string) {
	for i, e := range got.Events {
		id, via := str(e, "op"), str(e, "via")
		switch e["event"] {
		case "complete":
			if problem := c.complete(s, id, via); problem != "" {
				return nil, problem
			}
			completed = append(completed, [2]string{id, via})
		case "expire":
			if i == 0 || got.Events[i-1]["event"] != "complete" || str(got.Events[i-1], "op") != id ||
				str(got.Events[i-1], "via") != "expire" {
				return nil, fmt.Sprintf("exactly_once: onExpiration of %q not right after its completion by expiry", id)
			}
		case "purge":
			if s.Cmd != "advance" {
				return nil, fmt.Sprintf("purge_rule: a purge during %s; purges run only after a timer advance", s.Cmd)
			}
			c.stale = map[string]map[string]int{}
		case "stale_try":
			return nil, fmt.Sprintf("justified: %s called tryComplete on %q, already completed (KAFKA-17848)", s.Cmd, id)
		default:
			return nil, fmt.Sprintf("event %s is not a purgatory event", canonical(e))
		}
	}
	return completed, ""
}

// routes: the commands that may complete an op by each route.
var routes = map[string][]string{"try": {"watch", "try"}, "check": {"check"}, "force": {"force"},
	"expire": {"advance", "watch"}}

func (c *contract) complete(s *step, id, via string) string {
	o := c.ops[id]
	switch {
	case o == nil:
		return fmt.Sprintf("justified: completion of %q, which was never watched", id)
	case o.completed:
		return fmt.Sprintf("exactly_once: %q completed a second time (via %s)", id, via)
	case (via == "try" || via == "check") && !o.mayHold():
		return fmt.Sprintf("justified: %q completed via %s but its condition does not hold", id, via)
	case !slices.Contains(routes[via], s.Cmd) || s.Args["op"] != nil && str(s.Args, "op") != id:
		return fmt.Sprintf("justified: %q completed via %s during %s", id, via, s.Cmd)
	case via == "check" && c.live[str(s.Args, "key")][id] == 0:
		return fmt.Sprintf("justified: %q completed via check of %q, not a key it is watched on", id, str(s.Args, "key"))
	}
	w, pending := c.pending[id]
	c.leave(id)
	if via == "expire" && !pending {
		return fmt.Sprintf("justified: %q expired but was not in the timer", id)
	}
	if via == "expire" && c.now < w.lo {
		return fmt.Sprintf("on_time: op %q expired at %d, early: its %s firing window is %s", id, c.now,
			c.firing, w)
	}
	o.completed = true
	for key, entries := range c.live { // its entries turn stale
		if n := entries[id]; n > 0 {
			delete(entries, id)
			count(c.stale, key, id, n)
		}
	}
	return ""
}

func expectResult(s *step, got Observation, want any) string {
	if canonical(got.Result) != canonical(want) {
		return fmt.Sprintf("justified: %s returned %s; the observations imply %s", s.Cmd, canonical(got.Result),
			canonical(want))
	}
	return ""
}

func count(lists map[string]map[string]int, key, id string, n int) {
	if lists[key] == nil {
		lists[key] = map[string]int{}
	}
	lists[key][id] += n
}

func total(lists map[string]map[string]int) (n int64) {
	for _, entries := range lists {
		for _, k := range entries {
			n += int64(k)
		}
	}
	return n
}

// shutdown: the pending ids, any order, once each; with lazy_size, also some that left since the last advance.
func (c *contract) shutdown(result any) string {
	items, _ := result.([]any)
	var ids []string
	for _, item := range items {
		if id, ok := item.(string); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var pending []string
	for id := range c.pending {
		pending = append(pending, id)
	}
	sort.Strings(pending)
	ok := result != nil && len(ids) == len(items) && len(slices.Compact(slices.Clone(ids))) == len(ids)
	for _, p := range pending {
		ok = ok && slices.Contains(ids, p)
	}
	for _, id := range ids {
		_, isPending := c.pending[id]
		ok = ok && (isPending || c.d.LazySize && slices.Contains(c.departed, id))
	}
	if !ok {
		return fmt.Sprintf("counters: shutdown returned %s, expected the pending ids %q", canonical(result), pending)
	}
	return ""
}

func integer(v any) (int64, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	i, err := n.Int64()
	return i, err == nil
}

func or(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}
