#!/usr/bin/env node
"use strict";
// The kpurgatory adapter for timer.js: JSON Lines on stdin/stdout (specs/protocol.md), timer profile.
//
//   kpurgatory check --adapter "node conformance/examples/node-timer/adapter.js"
//   kpurgatory check --adapter "node conformance/examples/node-timer/adapter.js --off-by-one"   # fails
//
// Diagnostics go to stderr; stdout carries protocol lines only.

const readline = require("node:readline");
const { DomainError, SystemTimer, TimerTask } = require("./timer.js");

const offByOne = process.argv.includes("--off-by-one");

// JSON.parse turns integers into doubles, exact only below 2^53; the protocol's integers are 64-bit. Every bare
// number is quoted with a marker and revived as a BigInt (the alternation skips numbers inside strings), and
// BigInts are written back as bare digits.
const MARK = "\u0000int:";
function parse(line) {
  const quoted = line.replace(/"(?:[^"\\]|\\.)*"|-?\d+/g, (token) => (token[0] === '"' ? token : `"\\u0000int:${token}"`));
  return JSON.parse(quoted, (key, value) => (typeof value === "string" && value.startsWith(MARK) ? BigInt(value.slice(MARK.length)) : value));
}
function stringify(value) {
  return JSON.stringify(value, (key, v) => (typeof v === "bigint" ? MARK + v : v)).replace(/"\\u0000int:(-?\d+)"/g, "$1");
}

let timer = null;
let tasks = new Map();
let events = [];

function record(task) {
  events.push({ event: "run", task: task.id });
}

const commands = {
  hello: () => ({
    protocol_version: 1,
    implementation: `node-timer 1.0 (hierarchical timing wheel)${offByOne ? " with --off-by-one" : ""}`,
    profiles: ["timer"],
    features: ["wheel", "batch"],
  }),
  init: ({ profile, params }) => {
    if (profile !== "timer") throw new Error(`profile ${profile} is not implemented`);
    timer = new SystemTimer(params.tick_ms, params.wheel_size, params.start_ms, { offByOne });
    tasks = new Map();
    return null;
  },
  timer_add: ({ task: id, delay_ms: delayMs }) => {
    if (!tasks.has(id)) tasks.set(id, new TimerTask(id, delayMs, record));
    const task = tasks.get(id);
    if (task.delayMs !== delayMs) throw new Error(`task ${id} was created with delay_ms ${task.delayMs}`);
    timer.add(task);
    return null;
  },
  timer_cancel: ({ task: id }) => {
    if (!tasks.has(id)) throw new Error(`task ${id} was never added`);
    tasks.get(id).cancel();
    return null;
  },
  advance: ({ to_ms: toMs }) => {
    timer.advanceTo(toMs);
    return null;
  },
  size: () => timer.size(),
  shutdown: () => timer.pending().map((task) => task.id).sort(),
  wheel: () => timer.describe(),
};

// One request's answer, alone or in a batch: its observation, or a failure when it could not be executed.
function answer({ cmd, args }) {
  if (cmd === "batch") return { result: batch(args.requests), events: [] };
  if (!(cmd in commands)) return { failure: `unsupported command ${cmd}` };
  events = [];
  try {
    return { result: commands[cmd](args), events };
  } catch (error) {
    if (error instanceof DomainError) return { result: null, events: [], error: error.code };
    process.stderr.write(`${error.stack}\n`);
    return { failure: String(error.message) };
  }
}

// A whole run in one request (specs/protocol.md §3.3): each request answered as if alone; after a failure, which
// ends its run, every request up to the next init is skipped.
function batch(requests) {
  let skipping = false;
  return requests.map((request) => {
    skipping = skipping && request.cmd !== "init";
    if (skipping) return { skipped: true };
    const reply = answer(request);
    skipping = "failure" in reply;
    return reply;
  });
}

const input = readline.createInterface({ input: process.stdin, terminal: false });
input.on("line", (line) => {
  const request = parse(line);
  process.stdout.write(`${stringify({ seq: request.seq, ...answer(request) })}\n`);
});
input.on("close", () => process.exit(0));
