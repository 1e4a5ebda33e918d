"use strict";
// An in-process binding named by its module, run in a worker thread: a call that never returns (a synchronous loop)
// blocks the worker, not the test runner, and `drop` terminates it; the next case gets a new worker. The module is
// loaded here too, for what the binding declares and its `accepts`. Values cross as structured clones (BigInts and
// plain data); events are collected in the worker and sent back with the call's answer.
const path = require("node:path");
const { pathToFileURL } = require("node:url");
const { Worker, isMainThread, parentPort, workerData } = require("node:worker_threads");

// The binding a module exports (or default-exports): an object, or a function returning one.
async function load(module) {
  const url = module instanceof URL ? module : pathToFileURL(path.resolve(module));
  const exported = await import(url.href);
  const binding = exported.default ?? exported;
  return typeof binding === "function" ? binding() : binding;
}

const unanswered = (outcome, text) => Object.assign(new Error(text), { outcome });

// The worker's side: one instance at a time, each message a call ("create" makes the instance).
async function serve() {
  const binding = await load(new URL(workerData.module));
  const events = [];
  let instance = null;
  parentPort.on("message", async ({ method, args }) => {
    events.length = 0;
    try {
      const result = method === "create"
        ? void (instance = await binding.create(...args, (event) => events.push(event)))
        : method === "close" && !instance.close ? null : await instance[method](...args);
      parentPort.postMessage({ result: result === undefined ? null : result, events: [...events] });
    } catch (error) {
      parentPort.postMessage({ events: [...events], code: error && error.code, text: String(error) });
    }
  });
  parentPort.postMessage({ ready: true });
}

async function isolated(module) {
  const url = module instanceof URL ? module : pathToFileURL(path.resolve(module));
  const declared = await load(url);
  let worker = null;
  let waiting = null; // resolve/reject of the call in flight

  function start() {
    const mine = new Worker(__filename, { workerData: { module: url.href, kpurgatoryIsolated: true } });
    worker = mine;
    worker.unref(); // never what keeps the test runner alive
    const ready = new Promise((resolve, reject) => { waiting = { resolve, reject }; });
    worker.on("message", (message) => {
      const settle = waiting;
      waiting = null;
      if (settle) settle.resolve(message);
    });
    const gone = (why) => {
      if (worker !== mine) return; // a dropped worker's end: its call was given up already
      worker = null;
      const settle = waiting;
      waiting = null;
      if (settle) settle.reject(unanswered("crashed", why));
    };
    worker.on("error", (error) => gone(`the worker died: ${String(error)}`));
    worker.on("exit", (code) => gone(`the worker exited (status ${code})`));
    return ready;
  }

  async function send(method, args) {
    if (!worker) await start();
    const reply = await new Promise((resolve, reject) => {
      waiting = { resolve, reject };
      worker.postMessage({ method, args });
    });
    if (reply.text !== undefined) throw Object.assign(unanswered("failed", reply.text), { code: reply.code, events: reply.events });
    return reply;
  }

  const { create, ...rest } = declared;
  return {
    ...rest,
    async create(profile, params, emit) {
      await send("create", [profile, params]);
      return new Proxy({}, {
        get: (_, method) => (method === "then" ? undefined : async (...args) => {
          const reply = await send(method, args).catch((error) => {
            for (const event of error.events || []) emit(event);
            throw error;
          });
          for (const event of reply.events) emit(event);
          return reply.result;
        }),
      });
    },
    close() {
      if (worker) worker.terminate();
      worker = null;
    },
    [require("./driver.js").drop]() {
      this.close();
    },
  };
}

if (!isMainThread && workerData && workerData.kpurgatoryIsolated) serve();

module.exports = isolated;
