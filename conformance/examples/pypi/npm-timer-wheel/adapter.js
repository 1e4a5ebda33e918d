#!/usr/bin/env node
/*
 * kpurgatory adapter (specs/protocol.md, timer profile) for the npm package timer-wheel 1.0.0, on the virtual
 * clock of binding.js (which says what the package lacks and what is supplied for it).
 *
 *   kpurgatory check --profile timer --level contract --adapter "node adapter.js [--scale N]"
 *
 * --scale N: one millisecond of the protocol is N milliseconds of the package (default 1024, one tick of its
 * finest layer; binding.js says why). Integers of 16 digits or more are read exactly (as BigInt), the rest as
 * numbers.
 */
'use strict';

const readline = require('readline');
const timerWheel = require('./binding.js');

const scaleFlag = process.argv.indexOf('--scale');
const binding = timerWheel(scaleFlag >= 0 ? Number(process.argv[scaleFlag + 1]) : undefined);

let run = null;
let events = [];
const emit = (event) => events.push(event);

const commands = {
  hello: () => ({ protocol_version: 1, implementation: binding.name, profiles: binding.profiles, features: ['batch'] }),
  init: ({ profile, params }) => {
    run = binding.create(profile, params, emit);
    return null;
  },
  timer_add: ({ task, delay_ms }) => run.add(task, delay_ms),
  timer_cancel: ({ task }) => run.cancel(task),
  advance: ({ to_ms }) => run.advance(to_ms),
  size: () => run.size(),
  shutdown: () => run.shutdown(),
};

// One request's answer, alone or in a batch: its observation, or a failure when it could not be executed.
function answer({ cmd, args }) {
  if (cmd === 'batch') return { result: batch(args.requests), events: [] };
  const handler = commands[cmd];
  if (!handler) return { failure: `unsupported command ${cmd}` };
  events = [];
  try {
    const result = handler(args || {});
    return { result: result === undefined ? null : result, events };
  } catch (error) {
    if (error.code === 'delay_out_of_range') return { result: null, events: [], error: error.code };
    return { failure: String(error && error.stack || error) };
  }
}

// A whole run in one request (specs/protocol.md §3.3): each request answered as if alone; after a failure, which
// ends its run, every request up to the next init is skipped.
function batch(requests) {
  let skipping = false;
  return requests.map((request) => {
    skipping = skipping && request.cmd !== 'init';
    if (skipping) return { skipped: true };
    const reply = answer(request);
    skipping = 'failure' in reply;
    return reply;
  });
}

readline.createInterface({ input: process.stdin }).on('line', (line) => {
  const request = JSON.parse(line.replace(/(:\s*)(-?\d{16,})/g, '$1"$2"'));
  process.stdout.write(JSON.stringify({ seq: request.seq, ...answer(request) }) + '\n');
});
