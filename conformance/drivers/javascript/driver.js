"use strict";
// Runs kpurgatory's test vectors (its specs/vectors.md) against a binding, one node:test test per case.
//
// A case is a trace (specs/protocol.md §9) with the model's observations; the driver sends its commands to the
// binding and judges the answers at the binding's level: exact (the same results and errors, events equal as a
// sequence of the step's event groups) or contract (timer profile: a tracker of what is pending and its firing
// window). Every 64-bit integer is a BigInt: JSON.parse would round those above 2^53.

const fs = require("node:fs");
const path = require("node:path");
const { after, test } = require("node:test");
const { isDeepStrictEqual } = require("node:util");
const { parse, stringify, isInteger } = require("lossless-json");

const LONG_MAX = 2n ** 63n - 1n;
const READ_OUTS = new Set(["wheel", "delay_queue", "watcher_keys"]);
const CONTRACT_PURGATORY = "purgatory cases at the contract level are judged by `kpurgatory check/replay --level contract` "
  + "through the stdio adapter, not by this driver";
// Kafka's behaviour, what a binding that declares nothing promises (specs/protocol.md §3)
const KAFKA = { firing: "kafka", lazy_size: false, max_deadline_ms: LONG_MAX, beyond_max_deadline: "rejected",
  negative_delays: "run_at_once" };

// Integers become BigInts; a fraction or exponent where the protocol has integers only is kept as a Number, which
// never equals an expected BigInt.
const parseJson = (text) => parse(text, null, (value) => (isInteger(value) ? BigInt(value) : Number(value)));
const toJson = (value) => stringify(value);

// Text from a trace or an implementation reaches the terminal escaped: no control characters, no line separators.
const escape = (text) => String(text).replace(/[\u0000-\u001f\u007f-\u009f\u2028\u2029]/g,
  (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
const show = (value) => escape(value === undefined ? "(nothing)" : toJson(value));

// Numbers are BigInts whatever the implementation returned, so that 3 and 3n compare equal.
function canonical(value) {
  if (typeof value === "number" && Number.isInteger(value)) return BigInt(value);
  if (Array.isArray(value)) return value.map(canonical);
  if (value && typeof value === "object") {
    return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined).map(([k, v]) => [k, canonical(v)]));
  }
  return value === undefined ? null : value;
}

const byText = (a, b) => (toJson(a) < toJson(b) ? -1 : toJson(a) > toJson(b) ? 1 : 0);

// Results that are sets in meaning compare sorted: shutdown's ids, the entries of one bucket of the wheel read-out.
function normalise(cmd, result) {
  if (cmd === "shutdown" && Array.isArray(result)) return [...result].sort(byText);
  if (cmd === "wheel" && result && Array.isArray(result.levels)) {
    return { ...result, levels: result.levels.map((level) => ({ ...level,
      buckets: (level.buckets || []).map((b) => ({ ...b, entries: [...(b.entries || [])].sort(byText) })) })) };
  }
  return result;
}

function readTree(root) {
  if (!root) {
    throw new Error("KPURGATORY_VECTORS is not set: point it at a vector tree, made with `kpurgatory vectors DIR`");
  }
  const index = parseJson(fs.readFileSync(path.join(root, "index.json"), "utf8"));
  if (index.format !== "kpurgatory-vectors" || index.version !== 1n) {
    throw new Error(`${path.join(root, "index.json")}: not a kpurgatory-vectors tree of version 1`);
  }
  return index;
}

function readCase(root, entry) {
  const file = path.resolve(root, entry.path);
  if (!file.startsWith(path.resolve(root) + path.sep)) throw new Error(`case path ${escape(entry.path)} leaves the tree`);
  const lines = fs.readFileSync(file, "utf8").split("\n").filter((line) => line !== "").map(parseJson);
  return { header: lines[0], steps: lines.slice(1) };
}

// Why the binding cannot run a case, or null.
function whySkip(binding, entry) {
  if (!binding.profiles.includes(entry.profile)) return `profile ${entry.profile} is not implemented`;
  if (binding.level === "contract" && entry.profile === "purgatory") return CONTRACT_PURGATORY;
  const declared = binding.declarations.kafka_version ?? null;
  if ((entry.kafka_version ?? null) !== declared) {
    return `pinned to Kafka ${entry.kafka_version ?? "(current)"}; the binding declares ${declared ?? "current Kafka"}`;
  }
  const lacking = entry.commands.filter((cmd) => !READ_OUTS.has(cmd) && !binding.commands.includes(cmd));
  if (lacking.length) return `uses ${lacking.join(", ")}, which the binding does not support`;
  return binding.accepts ? binding.accepts(entry.profile, entry.params) : null;
}

// The instance method for a protocol command, and its arguments in order.
const CALLS = {
  timer_add: (a) => ["add", a.task, a.delay_ms],
  timer_cancel: (a) => ["cancel", a.task],
  advance: (a) => ["advance", a.to_ms],
  watch: (a) => ["watch", a.op, a.keys, a.delay_ms, a.ready_on],
  set_ready: (a) => ["setReady", a.op, a.ready ?? true],
  check: (a) => ["check", a.key],
  cancel_key: (a) => ["cancelKey", a.key],
  force: (a) => ["force", a.op],
  try: (a) => ["try", a.op],
  cancel: (a) => ["cancel", a.op],
  delay_queue: () => ["delayQueue"],
  watcher_keys: () => ["watcherKeys"],
};

// What the implementation answered: {result, events, error}, or {failure} when it could not answer.
async function call(instance, events, step) {
  const [method, ...args] = (CALLS[step.cmd] || (() => [step.cmd]))(step.args);
  events.length = 0;
  try {
    const result = await instance[method](...args);
    return { result: result === undefined ? null : result, events: [...events] };
  } catch (error) {
    if (error && (error.code === "delay_out_of_range" || error.code === "empty_keys")) {
      return { result: null, events: [...events], error: error.code };
    }
    return { failure: String(error && error.stack ? error.stack : error) };
  }
}

// The exact level: the first difference between the model's step and the answer, or null.
function exactDifference(step, answer) {
  const expectedError = step.error ?? null;
  if (expectedError !== (answer.error ?? null)) return `error: expected ${show(expectedError)}, observed ${show(answer.error ?? null)}`;
  const want = normalise(step.cmd, canonical(step.result)), got = normalise(step.cmd, canonical(answer.result));
  if (!isDeepStrictEqual(want, got)) return `result: expected ${show(want)}, observed ${show(got)}`;
  const expected = canonical(step.events), observed = canonical(answer.events);
  if (expected.length !== observed.length) {
    return `events: expected ${show(expected)}, observed ${show(observed)}`;
  }
  const sizes = step.expect && step.expect.groups ? step.expect.groups.map(Number) : [expected.length];
  let start = 0;
  for (const size of sizes) {
    const want = expected.slice(start, start + size).sort(byText), got = observed.slice(start, start + size).sort(byText);
    if (!isDeepStrictEqual(want, got)) {
      return `events ${start + 1}..${start + size} (one group, any order): expected ${show(want)}, observed ${show(got)}`;
    }
    start += size;
  }
  return null;
}

// The contract level, timer profile: what is pending and the window of its last add (model/contract.py).
class TimerContract {
  constructor(declarations, params) {
    this.declared = { ...KAFKA, ...declarations };
    this.declared.max_deadline_ms = BigInt(this.declared.max_deadline_ms);
    this.now = params.start_ms;
    this.pending = new Map(); // task -> [lo, hi]
    this.departed = new Set(); // left since the last advance (what lazy_size may still count)
    this.judging = true;
  }

  treatment(step) {
    const deadline = step.expect ? step.expect.deadline_ms : this.now + step.args.delay_ms;
    const d = this.declared;
    if (deadline === null || deadline > LONG_MAX || deadline > d.max_deadline_ms) return d.beyond_max_deadline;
    if (step.args.delay_ms < 0n && d.negative_delays !== "run_at_once") return d.negative_delays;
    return "accepted";
  }

  leave(task) {
    if (this.pending.delete(task)) this.departed.add(task);
  }

  // Every run is of a pending task whose window has opened.
  runs(answer) {
    for (const event of answer.events) {
      if (event.event !== "run") return `event ${show(event)} in the timer profile`;
      const window = this.pending.get(event.task);
      if (!window) return `task ${show(event.task)} ran but was not pending (twice, after a cancel, or never added)`;
      if (this.now < window[0]) return `task ${show(event.task)} ran at ${this.now}, before its window [${window}] opened`;
      this.leave(event.task);
    }
    return null;
  }

  counted(observed) {
    const n = BigInt(this.pending.size), lazy = this.declared.lazy_size ? BigInt(this.departed.size) : 0n;
    if (typeof observed !== "bigint" || observed < n || observed > n + lazy) {
      return `size ${show(observed)}; expected ${lazy ? `between ${n} and ${n + lazy} (lazy_size)` : n}`;
    }
    return null;
  }

  // The violation this step shows, or null; sets `judging` false at an input the declarations leave undefined.
  judge(step, answer) {
    const { cmd, args } = step;
    const result = canonical(answer.result);
    if (cmd === "timer_add") {
      const treatment = this.treatment(step), rejected = answer.error === "delay_out_of_range";
      if (treatment === "undefined") {
        this.judging = false;
        return null;
      }
      if (treatment === "rejected" && !rejected) return `timer_add outside the declared domain was not rejected with delay_out_of_range`;
      if (treatment === "accepted" && rejected) return `timer_add inside the declared domain was rejected`;
      if (rejected && answer.events.length) return `a rejected timer_add caused events`;
      if (!rejected) {
        this.leave(args.task);
        this.pending.set(args.task, step.expect.windows[this.declared.firing].map(BigInt));
      }
      return this.runs(answer);
    }
    if (cmd === "timer_cancel") this.leave(args.task);
    if (cmd === "advance") this.now = args.to_ms;
    const wrong = this.runs(answer);
    if (wrong) return wrong;
    if (cmd === "advance") {
      this.departed.clear();
      const late = [...this.pending].filter(([, [, hi]]) => hi <= this.now).map(([task]) => task).sort();
      if (late.length) return `still pending after advance to ${this.now}, past their window: ${show(late)}`;
    }
    if (cmd === "size") return this.counted(result);
    if (cmd === "shutdown") {
      const reported = Array.isArray(result) ? result : [];
      const allowed = new Set([...this.pending.keys(), ...(this.declared.lazy_size ? this.departed : [])]);
      const missing = [...this.pending.keys()].filter((task) => !reported.includes(task));
      if (!Array.isArray(result) || new Set(reported).size !== reported.length || missing.length
          || reported.some((task) => !allowed.has(task))) {
        return `shutdown ${show(result)}; pending: ${show([...this.pending.keys()].sort())}`;
      }
    }
    return null;
  }
}

// The observed run as a trace: the case's lines up to the failing step, each with what the binding answered.
function writeObserved(binding, entry, kase, answers, outDir) {
  const header = { ...kase.header, header: { ...kase.header.header, implementation: binding.name,
    declarations: binding.declarations } };
  if (Object.keys(binding.declarations).length === 0) delete header.header.declarations;
  const lines = [header, ...kase.steps.slice(0, answers.length).map((step, i) => (answers[i] ? { ...step, system: answers[i] } : step))];
  fs.mkdirSync(outDir, { recursive: true });
  const file = path.resolve(outDir, `${String(entry.id).replace(/[^A-Za-z0-9._-]/g, "_")}.observed.jsonl`);
  fs.writeFileSync(file, lines.map((line) => `${toJson(line)}\n`).join(""));
  return file;
}

// A failed case: its message is the whole report (no stack: the driver's frames say nothing about the case).
class CaseFailure extends Error {
  constructor(message, step, observed) {
    super(message);
    this.name = "CaseFailure";
    this.stack = `${this.name}: ${message}`;
    Object.defineProperties(this, { step: { value: step }, observed: { value: observed } });
  }
}

// Runs one case; throws a CaseFailure naming the case, the step, expected vs observed and the observed run.
async function runCase(binding, root, entry, outDir) {
  const kase = readCase(root, entry);
  const params = kase.header.header.params;
  const events = [];
  const emit = (event) => events.push(event);
  const contract = binding.level === "contract" ? new TimerContract(binding.declarations, params) : null;
  const instance = await binding.create(entry.profile, params, emit);
  const answers = [];
  try {
    for (const step of kase.steps) {
      if (READ_OUTS.has(step.cmd) && !binding.commands.includes(step.cmd)) { // never sent, as in `kpurgatory check`
        answers.push(null);
        continue;
      }
      const answer = await call(instance, events, step);
      answers.push(answer);
      const wrong = answer.failure !== undefined ? `the implementation failed: ${escape(answer.failure)}`
        : contract ? contract.judge(step, answer) : exactDifference(step, answer);
      if (wrong) {
        const observed = writeObserved(binding, entry, kase, answers, outDir);
        throw new CaseFailure([
          `${escape(entry.path)} failed at step ${step.seq} ${step.cmd}(${show(step.args)}) [${binding.level} level]`,
          `  ${wrong}`,
          `  model: result ${show(step.result)}, events ${show(step.events)}${step.error ? `, error ${show(step.error)}` : ""}`,
          `  observed: ${show(answer)}`,
          ...(entry.finding ? [`  (a Kafka finding's case: ${escape(entry.finding)}; Kafka fails it by design)`] : []),
          `  observed run: ${escape(observed)}`,
          `  replay it: kpurgatory replay ${escape(observed)} --level ${binding.level}`,
        ].join("\n"), step.seq, observed);
      }
      if (contract && !contract.judging) break; // an input the declarations leave undefined: nothing after it is judged
    }
  } finally {
    if (instance.close) await instance.close();
  }
}

// The fields a binding may leave out, as they are then: a Kafka-like timer, judged exactly.
const TIMER = { level: "exact", declarations: {}, profiles: ["timer"],
  commands: ["timer_add", "timer_cancel", "advance", "size", "shutdown"] };

// Registers one node:test test per case of the tree KPURGATORY_VECTORS names, run against the binding (or the
// binding a function returns); writes the results file KPURGATORY_VECTORS_RESULTS names, if any, after them.
async function run(bindingOrFactory) {
  const binding = typeof bindingOrFactory === "function" ? bindingOrFactory() : bindingOrFactory;
  if (binding.open) await binding.open(); // the stdio binding learns its profiles and declarations from hello
  for (const [field, value] of Object.entries(TIMER)) binding[field] ??= structuredClone(value);
  const root = process.env.KPURGATORY_VECTORS;
  const index = readTree(root);
  const outDir = process.env.KPURGATORY_VECTORS_OUT || path.resolve("target", "kpurgatory");
  const verdicts = [];
  after(() => {
    if (binding.close) binding.close();
    const file = process.env.KPURGATORY_VECTORS_RESULTS;
    if (!file) return;
    fs.writeFileSync(file, `${toJson({ format: "kpurgatory-vector-results", version: 1, driver: "javascript",
      implementation: binding.name, level: binding.level, declarations: binding.declarations, cases: verdicts })}\n`);
  });
  for (const entry of index.cases) {
    const reason = whySkip(binding, entry);
    const verdict = { path: entry.path, verdict: "pass", reason: null, step: null, observed: null };
    verdicts.push(verdict);
    if (reason) {
      Object.assign(verdict, { verdict: "skip", reason });
      test(escape(entry.path), { skip: escape(reason) }, () => {});
      continue;
    }
    test(escape(entry.path), async () => {
      try {
        await runCase(binding, root, entry, outDir);
      } catch (error) {
        const failure = error instanceof CaseFailure
          ? { reason: error.message, step: error.step, observed: error.observed }
          : { reason: escape(error.stack || error) }; // the binding or the driver broke, not a judged step
        Object.assign(verdict, { verdict: "fail", ...failure });
        throw error;
      }
    });
  }
}

module.exports = { run, escape, parseJson, toJson };
