package vectors

import (
	"encoding/json"
	"fmt"
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

// contract: the timer profile's contract (specs/vectors.md), with a tracker of pending tasks and their windows.
type contract struct {
	d       Declarations
	firing  string
	now     int64
	pending map[string][2]int64 // task -> its firing window [lo, hi] from its last add
	left    []string            // entries that left the timer since the last advance (what lazy_size may count)
}

func newContract(d Declarations, p Params) *contract {
	firing := d.Firing
	if firing == "" {
		firing = "kafka"
	}
	return &contract{d: d, firing: firing, now: p.StartMs, pending: map[string][2]int64{}}
}

func (c *contract) undefined(s *step) bool {
	return s.Cmd == "timer_add" && c.treatment(num(s.Args, "delay_ms"), s.Expect.DeadlineMs) == "undefined"
}

func (c *contract) step(s *step, got Observation) string {
	if s.Cmd == "timer_add" {
		if c.treatment(num(s.Args, "delay_ms"), s.Expect.DeadlineMs) == "rejected" {
			if got.Error != ErrDelayOutOfRange.Error() || len(got.Events) > 0 {
				return fmt.Sprintf("the deadline is outside the declared domain: expected error delay_out_of_range "+
					"and no events, observed error %q and %d events", got.Error, len(got.Events))
			}
			return ""
		}
	}
	if got.Error != "" {
		return fmt.Sprintf("error %q; the contract expects none here", got.Error)
	}
	switch s.Cmd {
	case "timer_add":
		task := str(s.Args, "task")
		c.leave(task)
		c.pending[task] = s.Expect.Windows[c.firing]
	case "advance":
		c.now = num(s.Args, "to_ms")
	}
	for _, e := range got.Events {
		if problem := c.ran(e); problem != "" {
			return problem
		}
	}
	switch s.Cmd {
	case "timer_add", "timer_cancel", "advance":
		if got.Result != nil {
			return fmt.Sprintf("result %s, expected null", canonical(got.Result))
		}
	}
	switch s.Cmd {
	case "timer_cancel":
		c.leave(str(s.Args, "task"))
	case "advance":
		c.left = nil
		var late []string
		for task, w := range c.pending {
			if w[1] <= c.now {
				late = append(late, fmt.Sprintf("%q (window [%d, %d])", task, w[0], w[1]))
			}
		}
		if len(late) > 0 {
			sort.Strings(late)
			return fmt.Sprintf("still pending after advance to %d, past the end of their %s firing window: %v",
				c.now, c.firing, late)
		}
	case "size":
		n, ok := integer(got.Result)
		lazy := 0
		if c.d.LazySize {
			lazy = len(c.left)
		}
		if !ok || n < int64(len(c.pending)) || n > int64(len(c.pending)+lazy) {
			return fmt.Sprintf("size %s, expected %d pending (up to %d more with lazy_size)",
				canonical(got.Result), len(c.pending), lazy)
		}
	case "shutdown":
		return c.shutdown(got.Result)
	}
	return ""
}

// treatment is how the declarations treat a timer_add: "accepted", "rejected" or "undefined".
func (c *contract) treatment(delay int64, deadline *int64) string {
	limit := int64(longMax)
	if c.d.MaxDeadlineMs != nil {
		limit = *c.d.MaxDeadlineMs
	}
	if deadline == nil || *deadline > limit {
		return or(c.d.BeyondMaxDeadline, "rejected")
	}
	if delay < 0 {
		if n := or(c.d.NegativeDelays, "run_at_once"); n != "run_at_once" {
			return n
		}
	}
	return "accepted"
}

// ran judges one event: a run of a pending task whose window has opened (never early, twice or after a cancel).
func (c *contract) ran(e Event) string {
	task, isRun := e["task"].(string)
	if e["event"] != "run" || !isRun || len(e) != 2 {
		return fmt.Sprintf("event %s: the timer profile has only {\"event\": \"run\", \"task\": ...}", canonical(e))
	}
	w, ok := c.pending[task]
	if !ok {
		return fmt.Sprintf("task %q ran at %d but is not pending (never added, already ran, or cancelled)", task, c.now)
	}
	if c.now < w[0] {
		return fmt.Sprintf("task %q ran at %d, early: its %s firing window is [%d, %d]", task, c.now, c.firing, w[0], w[1])
	}
	c.leave(task)
	return ""
}

func (c *contract) leave(task string) {
	if _, ok := c.pending[task]; ok {
		delete(c.pending, task)
		c.left = append(c.left, task)
	}
}

// shutdown: the sorted pending ids; with lazy_size, a superset drawn from those and the ones that left since.
func (c *contract) shutdown(result any) string {
	items, _ := result.([]any)
	var ids []string
	for _, item := range items {
		if id, ok := item.(string); ok {
			ids = append(ids, id)
		}
	}
	var pending []string
	for task := range c.pending {
		pending = append(pending, task)
	}
	sort.Strings(pending)
	ok := result != nil && len(ids) == len(items) && slices.IsSorted(ids) && len(slices.Compact(slices.Clone(ids))) == len(ids)
	for _, p := range pending {
		ok = ok && slices.Contains(ids, p)
	}
	for _, id := range ids {
		_, isPending := c.pending[id]
		ok = ok && (isPending || c.d.LazySize && slices.Contains(c.left, id))
	}
	if !ok {
		return fmt.Sprintf("shutdown returned %s, expected the sorted pending ids %q", canonical(result), pending)
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
