"use strict";
// The stdio binding: an adapter process speaking specs/protocol.md, started from KPURGATORY_ADAPTER, e.g.
//   KPURGATORY_ADAPTER="python -m kpurgatory.conformance.adapters.stdio kpurgatory.conformance.adapters.builtin:factory"
// One process serves every case (hello once, init per case). A request waits for its answer; the driver's per-call limit
// decides a hang. An adapter that exits, hangs, garbles or fails a call is killed (`drop`) and the next case starts
// another.
// The level is exact, or KPURGATORY_LEVEL=contract for an implementation that is no Kafka clone (judged by the
// declarations of its hello).

const { spawn } = require("node:child_process");
const readline = require("node:readline");
const { drop, escape, parseJson, toJson } = require("./driver.js");

const STDERR_TAIL = 2000;
// An answer that is none: the driver reports the step as this outcome (specs/vectors.md §4).
const unanswered = (outcome, text) => Object.assign(new Error(text), { outcome });

class Adapter {
  constructor(command) {
    this.child = spawn(command, { shell: true, detached: true, stdio: ["pipe", "pipe", "pipe"] });
    this.seq = 0n;
    this.waiting = null; // resolve/reject of the one request in flight
    this.stderr = "";
    this.exited = null;
    this.child.stderr.on("data", (chunk) => { this.stderr = (this.stderr + chunk).slice(-STDERR_TAIL); });
    this.child.on("exit", (code, signal) => {
      this.exited = `the adapter exited (${signal || `status ${code}`})`;
      this.settle(unanswered("crashed", this.describe(this.exited)));
    });
    this.child.stdin.on("error", () => {}); // a dead adapter is reported by its exit
    readline.createInterface({ input: this.child.stdout }).on("line", (line) => {
      try {
        this.settle(null, parseJson(line));
      } catch (error) {
        this.settle(unanswered("failed", this.describe(`garbage on stdout: ${line.slice(0, 200)}`)));
      }
    });
  }

  describe(what) {
    return escape(`${what}${this.stderr ? `; its stderr ends: ${this.stderr.trim()}` : ""}`);
  }

  settle(error, message) {
    const waiting = this.waiting;
    this.waiting = null;
    if (waiting) error ? waiting.reject(error) : waiting.resolve(message);
  }

  // Sends one request and resolves with its response (seq checked); rejects if the adapter dies or garbles.
  async request(cmd, args) {
    if (this.exited) throw unanswered("crashed", this.describe(this.exited));
    const seq = this.seq++;
    const response = new Promise((resolve, reject) => { this.waiting = { resolve, reject }; });
    this.child.stdin.write(`${toJson({ seq, cmd, args })}\n`);
    const message = await response;
    if (!message || message.seq !== seq) throw unanswered("failed", this.describe(`answered seq ${message && message.seq} to seq ${seq}`));
    return message;
  }

  close() {
    this.child.stdin.end();
    if (!this.exited) {
      try {
        process.kill(-this.child.pid); // its process group: the shell and the adapter it started
      } catch {
        // already gone
      }
    }
    this.exited = this.exited || "the adapter was stopped";
  }
}

// The instance method a driver calls -> the protocol request (driver.js CALLS, in reverse).
const REQUESTS = {
  add: (task, delay_ms) => ["timer_add", { task, delay_ms }],
  advance: (to_ms) => ["advance", { to_ms }],
  watch: (op, keys, delay_ms, ready_on) => ["watch", delay_ms === undefined ? { op, keys } : { op, keys, delay_ms, ready_on }],
  setReady: (op, ready) => ["set_ready", ready ? { op } : { op, ready }],
  check: (key) => ["check", { key }],
  cancelKey: (key) => ["cancel_key", { key }],
  force: (op) => ["force", { op }],
  try: (op) => ["try", { op }],
  delayQueue: () => ["delay_queue", {}],
  watcherKeys: () => ["watcher_keys", {}],
};

function binding(command = process.env.KPURGATORY_ADAPTER) {
  if (!command) throw new Error("KPURGATORY_ADAPTER is not set: the stdio binding needs the adapter's command");
  let adapter = null;
  const self = {
    level: process.env.KPURGATORY_LEVEL || "exact",
    async open() {
      adapter = new Adapter(command);
      const hello = (await adapter.request("hello", { protocol_version: 1 })).result;
      if (!hello || hello.protocol_version !== 1n) throw new Error(`the adapter's hello is not protocol version 1: ${escape(toJson(hello))}`);
      const unsupported = hello.unsupported_commands || [];
      Object.assign(self, {
        name: hello.implementation,
        declarations: hello.declarations || {},
        profiles: hello.profiles,
        // every command of its profiles but those it lists as unsupported, and the read-outs it lists
        commands: [...COMMANDS.filter((cmd) => !unsupported.includes(cmd)), ...(hello.features || [])],
      });
    },
    async create(profile, params, emit) {
      if (!adapter || adapter.exited) await self.open();
      const send = async (cmd, args) => {
        const response = await adapter.request(cmd, args);
        if (response.failure !== undefined) throw unanswered("failed", escape(response.failure));
        if (response.hung !== undefined) throw unanswered("hung", escape(`the adapter stopped ${cmd}: ${response.hung}`));
        for (const event of response.events || []) emit(event);
        if (response.error) throw Object.assign(new Error(response.error), { code: response.error });
        return response.result;
      };
      await send("init", { profile, params });
      const instance = {};
      for (const [method, request] of Object.entries(REQUESTS)) instance[method] = (...args) => send(...request(...args));
      for (const cmd of ["size", "shutdown", "wheel", "watched", "delayed"]) instance[cmd] = () => send(cmd, {});
      // cancel is the timer's timer_cancel(task) or the purgatory's cancel(op)
      instance.cancel = profile === "timer" ? (task) => send("timer_cancel", { task }) : (op) => send("cancel", { op });
      return instance;
    },
    close() {
      if (adapter) adapter.close();
    },
    [drop]() {
      self.close();
    },
  };
  return self;
}

const COMMANDS = ["timer_add", "timer_cancel", "advance", "size", "shutdown", "watch", "set_ready", "check", "cancel_key",
  "force", "try", "cancel", "watched", "delayed"];

module.exports = binding;
