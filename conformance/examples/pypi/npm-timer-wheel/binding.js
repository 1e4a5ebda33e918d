'use strict';
/*
 * The npm package timer-wheel 1.0.0 (aholstenson/timer-wheel: Transitory's and Caffeine's hierarchical wheel) on a
 * virtual clock, through its ReschedulingTimerWheel: schedule(id, delay) adds or moves a task, unschedule(id)
 * cancels it, advance() returns what expired. Used by adapter.js (the stdio protocol) and, as a binding of the
 * vector driver (the npm package kpurgatory-vectors, conformance/drivers/javascript), by a project's test file.
 *
 * The package has no injectable clock: schedule() and advance() read Date.now(). Each call into the package runs
 * with Date.now replaced by the virtual clock, so the package's own code runs unchanged on virtual time.
 *
 * scale: one millisecond of the protocol is `scale` milliseconds of the package (default 1024). The package is
 * "designed for larger delays and has a minimum delay of 1000 ms": its finest layer ticks every 1024 ms. At the
 * default scale one protocol millisecond is one such tick, so the wheel is judged at its own resolution; scale 1
 * judges it at the protocol's millisecond.
 *
 * Declarations: none, so Kafka's. The package expires an item once the clock reaches its time (`node.time <= time`),
 * which is inside Kafka's window; it has no size (unbounded, so no max deadline of its own to declare) and takes
 * negative delays (due at once). The contract level, since it is no Kafka clone: it runs a due task at its next
 * advance, not inside the add.
 *
 * What the package lacks, the binding supplies: size and shutdown read the package's own map of scheduled items
 * (ReschedulingTimerWheel.items, private in TypeScript only); a deadline past Long.MAX_VALUE is rejected with
 * delay_out_of_range, the vocabulary's domain rule (the package would schedule it at a rounded double).
 */

const { ReschedulingTimerWheel } = require('timer-wheel');

const LONG_MAX = (1n << 63n) - 1n;
const realNow = Date.now;

class DomainError extends Error {
  constructor(message) {
    super(message);
    this.code = 'delay_out_of_range';
  }
}

function timerWheel(scale = 1024) {
  return {
    name: `npm timer-wheel 1.0.0 (ReschedulingTimerWheel; Date.now virtualised; 1 ms = ${scale} wheel ms)`,
    level: 'contract',
    declarations: {},
    profiles: ['timer'],
    commands: ['timer_add', 'timer_cancel', 'advance', 'size', 'shutdown'],
    create(profile, params, emit) {
      if (profile !== 'timer') throw new Error(`profile ${profile} is not supported`);
      const start = BigInt(params.start_ms);
      let now = start;
      let virtualNow = 0;
      // the package reads Date.now inside each call; outside them the process keeps its real clock
      const onVirtualTime = (call) => {
        Date.now = () => virtualNow;
        try {
          return call();
        } finally {
          Date.now = realNow;
        }
      };
      const wheel = onVirtualTime(() => new ReschedulingTimerWheel());
      return {
        add(task, delayMs) {
          if (now + BigInt(delayMs) > LONG_MAX) throw new DomainError(`deadline ${now + BigInt(delayMs)} is past Long.MAX_VALUE`);
          onVirtualTime(() => wheel.schedule(task, Number(delayMs) * scale));
        },
        cancel: (task) => onVirtualTime(() => wheel.unschedule(task)),
        advance(toMs) {
          now = BigInt(toMs);
          virtualNow = Number(now - start) * scale;
          for (const task of onVirtualTime(() => wheel.advance())) emit({ event: 'run', task });
        },
        size: () => wheel.items.size,
        shutdown: () => [...wheel.items.keys()].sort(),
      };
    },
  };
}

module.exports = timerWheel;
