"use strict";
// A hierarchical timing wheel after Kafka's SystemTimer, TimingWheel and TimerTaskList, on a virtual clock.
//
// It is a Kafka-like wheel on purpose, so it passes kpurgatory's timer profile at the exact level: tasks run at the
// start of their tick, overflow wheels are created lazily with the lower wheel's current time, buckets are queued
// only when their expiration changes, and a released bucket's entries are re-inserted from the finest wheel up.
// Times are BigInt milliseconds, since the protocol's integers are 64-bit.
//
// `offByOne: true` plants a bug: the "already expired" test becomes `<=`, so an entry due exactly one tick after
// the wheel's current time runs a tick early.

const LONG_MAX = 2n ** 63n - 1n;

class DomainError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

class TimerTask {
  constructor(id, delayMs, run) {
    this.id = id;
    this.delayMs = delayMs;
    this.run = run;
    this.entry = null;
  }

  cancel() {
    if (this.entry) this.entry.remove();
    this.entry = null;
  }

  // A task has at most one live entry: re-adding it evicts the old one (and so resets its deadline).
  setEntry(entry) {
    if (this.entry && this.entry !== entry) this.entry.remove();
    this.entry = entry;
  }
}

class TimerTaskEntry {
  constructor(task, expirationMs) {
    this.task = task;
    this.expirationMs = expirationMs;
    this.bucket = null;
  }

  cancelled() {
    return this.task.entry !== this;
  }

  remove() {
    if (this.bucket) this.bucket.remove(this);
  }
}

// A bucket: entries in insertion order (a Set keeps it) and the start of the tick they belong to (-1: unused).
class TimerTaskList {
  constructor() {
    this.expirationMs = -1n;
    this.entries = new Set();
  }

  add(entry) {
    entry.remove();
    this.entries.add(entry);
    entry.bucket = this;
  }

  remove(entry) {
    if (entry.bucket === this) {
      this.entries.delete(entry);
      entry.bucket = null;
    }
  }

  setExpiration(expirationMs) {
    const changed = this.expirationMs !== expirationMs;
    this.expirationMs = expirationMs;
    return changed;
  }

  flush() {
    const flushed = [...this.entries];
    for (const entry of flushed) this.remove(entry);
    this.expirationMs = -1n;
    return flushed;
  }
}

// Kafka's DelayQueue of buckets: a binary heap ordered by expiration, then by offer order.
class DelayQueue {
  constructor() {
    this.heap = [];
    this.offers = 0;
  }

  before(a, b) {
    return a.expirationMs < b.expirationMs || (a.expirationMs === b.expirationMs && a.order < b.order);
  }

  offer(bucket) {
    const heap = this.heap;
    heap.push({ expirationMs: bucket.expirationMs, order: this.offers++, bucket });
    for (let i = heap.length - 1; i > 0;) {
      const parent = (i - 1) >> 1;
      if (!this.before(heap[i], heap[parent])) break;
      [heap[i], heap[parent]] = [heap[parent], heap[i]];
      i = parent;
    }
  }

  pollDue(nowMs) {
    const heap = this.heap;
    if (heap.length === 0 || heap[0].expirationMs > nowMs) return null;
    const top = heap[0];
    const last = heap.pop();
    if (heap.length > 0) {
      heap[0] = last;
      for (let i = 0; ;) {
        const left = 2 * i + 1, right = left + 1;
        let least = i;
        if (left < heap.length && this.before(heap[left], heap[least])) least = left;
        if (right < heap.length && this.before(heap[right], heap[least])) least = right;
        if (least === i) break;
        [heap[i], heap[least]] = [heap[least], heap[i]];
        i = least;
      }
    }
    return top.bucket;
  }
}

class TimingWheel {
  constructor(tickMs, wheelSize, startMs, queue, offByOne) {
    this.tickMs = tickMs;
    this.wheelSize = wheelSize;
    this.interval = tickMs * wheelSize;
    this.currentTimeMs = startMs - (startMs % tickMs);
    this.queue = queue;
    this.offByOne = offByOne;
    this.buckets = Array.from({ length: Number(wheelSize) }, () => new TimerTaskList());
    this.overflowWheel = null;
  }

  // Place the entry here or in an overflow wheel; false means cancelled or already expired (run it).
  add(entry) {
    const expiration = entry.expirationMs;
    if (entry.cancelled()) return false;
    const nextTick = this.currentTimeMs + this.tickMs;
    if (this.offByOne ? expiration <= nextTick : expiration < nextTick) return false;
    if (expiration < this.currentTimeMs + this.interval) {
      const virtualId = expiration / this.tickMs;
      const bucket = this.buckets[Number(virtualId % this.wheelSize)];
      bucket.add(entry);
      if (bucket.setExpiration(virtualId * this.tickMs)) this.queue.offer(bucket);
      return true;
    }
    if (!this.overflowWheel) {
      this.overflowWheel = new TimingWheel(this.interval, this.wheelSize, this.currentTimeMs, this.queue, this.offByOne);
    }
    return this.overflowWheel.add(entry);
  }

  advanceClock(timeMs) {
    if (timeMs >= this.currentTimeMs + this.tickMs) {
      this.currentTimeMs = timeMs - (timeMs % this.tickMs);
      if (this.overflowWheel) this.overflowWheel.advanceClock(this.currentTimeMs);
    }
  }

  * levels() {
    for (let wheel = this; wheel; wheel = wheel.overflowWheel) yield wheel;
  }
}

class SystemTimer {
  constructor(tickMs, wheelSize, startMs, { offByOne = false } = {}) {
    this.nowMs = startMs;
    this.queue = new DelayQueue();
    this.timingWheel = new TimingWheel(tickMs, wheelSize, startMs, this.queue, offByOne);
  }

  add(task) {
    const expirationMs = this.nowMs + task.delayMs;
    if (expirationMs > LONG_MAX) {
      throw new DomainError("delay_out_of_range", `expiration ${expirationMs} exceeds Long.MAX_VALUE`);
    }
    const entry = new TimerTaskEntry(task, expirationMs);
    task.setEntry(entry);
    this.addEntry(entry);
  }

  addEntry(entry) {
    if (!this.timingWheel.add(entry) && !entry.cancelled()) entry.task.run(entry.task);
  }

  // Release every bucket due by toMs, earliest first, re-inserting (cascading or running) its entries.
  advanceTo(toMs) {
    this.nowMs = toMs;
    for (let bucket; (bucket = this.queue.pollDue(toMs));) {
      this.timingWheel.advanceClock(bucket.expirationMs);
      for (const entry of bucket.flush()) this.addEntry(entry);
    }
  }

  pending() {
    const tasks = [];
    for (const wheel of this.timingWheel.levels()) {
      for (const bucket of wheel.buckets) for (const entry of bucket.entries) tasks.push(entry.task);
    }
    return tasks;
  }

  size() {
    return this.pending().length;
  }

  describe() {
    return {
      levels: [...this.timingWheel.levels()].map((wheel) => ({
        tick_ms: wheel.tickMs,
        wheel_size: wheel.wheelSize,
        current_ms: wheel.currentTimeMs,
        buckets: wheel.buckets
          .map((bucket, slot) => ({ slot, expiration_ms: bucket.expirationMs, entries: [...bucket.entries].map((e) => e.task.id) }))
          .filter((bucket) => bucket.entries.length > 0),
      })),
    };
  }
}

module.exports = { DomainError, SystemTimer, TimerTask };
