"use strict";
// The binding of timer.js for the vector driver (the npm package kpurgatory-vectors, conformance/drivers/javascript):
// timer profile, exact level, with the wheel read-out. A project's test file runs it with `run(binding)`.

const { SystemTimer, TimerTask } = require("./timer.js");

module.exports = {
  name: "node-timer 1.0 (hierarchical timing wheel)",
  level: "exact",
  declarations: {},
  profiles: ["timer"],
  commands: ["timer_add", "timer_cancel", "advance", "size", "shutdown", "wheel"],
  create(profile, params, emit) {
    const timer = new SystemTimer(params.tick_ms, params.wheel_size, params.start_ms);
    const tasks = new Map();
    const run = (task) => emit({ event: "run", task: task.id });
    return {
      add(id, delayMs) {
        if (!tasks.has(id)) tasks.set(id, new TimerTask(id, delayMs, run));
        timer.add(tasks.get(id)); // throws a DomainError with code delay_out_of_range past Long.MAX_VALUE
      },
      cancel: (id) => tasks.get(id).cancel(),
      advance: (toMs) => timer.advanceTo(toMs),
      size: () => timer.size(),
      shutdown: () => timer.pending().map((task) => task.id),
      wheel: () => timer.describe(),
    };
  },
};
