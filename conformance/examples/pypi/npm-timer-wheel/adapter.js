#!/usr/bin/env node
/*
 * kpurgatory adapter (specs/protocol.md, timer profile) for the npm package timer-wheel 1.0.0
 * (aholstenson/timer-wheel: Transitory's and Caffeine's hierarchical wheel), through its ReschedulingTimerWheel:
 * schedule(id, delay) adds or moves a task, unschedule(id) cancels it, advance() returns what expired.
 *
 *   kpurgatory check --profile timer --level contract --adapter "node adapter.js [--scale N]"
 *
 * The package has no injectable clock: schedule() and advance() read Date.now(). This process replaces Date.now
 * with the virtual clock, so the package's own code runs unchanged on virtual time.
 *
 * --scale N: one millisecond of the protocol is N milliseconds of the package (default 1024). The package is
 * "designed for larger delays and has a minimum delay of 1000 ms": its finest layer ticks every 1024 ms. At the
 * default scale one protocol millisecond is one such tick, so the check judges the wheel at its own resolution;
 * --scale 1 judges it at the protocol's millisecond.
 *
 * What the package lacks, the adapter supplies, and says so here: size and shutdown read the package's own map of
 * scheduled items (ReschedulingTimerWheel.items, private in TypeScript only); a deadline past Long.MAX_VALUE is
 * rejected with delay_out_of_range, the vocabulary's domain rule (the package would schedule it at a rounded
 * double). Integers of 16 digits or more are read exactly (as BigInt), the rest as numbers.
 */
'use strict';

const readline = require('readline');
const { ReschedulingTimerWheel } = require('timer-wheel');

const LONG_MAX = (1n << 63n) - 1n;
const scaleFlag = process.argv.indexOf('--scale');
const SCALE = scaleFlag >= 0 ? Number(process.argv[scaleFlag + 1]) : 1024;

let virtualNow = 0;
Date.now = () => virtualNow;

let run = null; // {wheel, start, now} of the current run (BigInt times in protocol milliseconds)

function setClock(nowMs) {
  virtualNow = Number(nowMs - run.start) * SCALE;
}

function pending() {
  return [...run.wheel.items.keys()].sort();
}

const commands = {
  hello: () => ({
    protocol_version: 1,
    implementation: `npm timer-wheel 1.0.0 (ReschedulingTimerWheel; Date.now virtualised; 1 ms = ${SCALE} wheel ms)`,
    profiles: ['timer'],
    features: [],
  }),
  init: ({ profile, params }) => {
    if (profile !== 'timer') throw new Error(`profile ${profile} is not supported`);
    run = { start: BigInt(params.start_ms), now: BigInt(params.start_ms) };
    virtualNow = 0;
    run.wheel = new ReschedulingTimerWheel();
    return null;
  },
  timer_add: ({ task, delay_ms }) => {
    if (run.now + BigInt(delay_ms) > LONG_MAX) return { error: 'delay_out_of_range' };
    run.wheel.schedule(task, Number(delay_ms) * SCALE);
    return null;
  },
  timer_cancel: ({ task }) => {
    run.wheel.unschedule(task);
    return null;
  },
  advance: ({ to_ms }, events) => {
    run.now = BigInt(to_ms);
    setClock(run.now);
    for (const task of run.wheel.advance()) events.push({ event: 'run', task });
    return null;
  },
  size: () => run.wheel.items.size,
  shutdown: () => pending(),
};

function respond(message) {
  process.stdout.write(JSON.stringify(message) + '\n');
}

readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const request = JSON.parse(line.replace(/(:\s*)(-?\d{16,})/g, '$1"$2"'));
  const handler = commands[request.cmd];
  if (!handler) return respond({ seq: request.seq, failure: `unsupported command ${request.cmd}` });
  const events = [];
  try {
    const result = handler(request.args || {}, events);
    if (result && result.error) respond({ seq: request.seq, result: null, events, error: result.error });
    else respond({ seq: request.seq, result, events });
  } catch (error) {
    respond({ seq: request.seq, failure: String(error && error.stack || error) });
  }
});
