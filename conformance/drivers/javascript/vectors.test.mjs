// node --test in this folder: every vector against the stdio binding (KPURGATORY_ADAPTER), or against the binding
// module KPURGATORY_BINDING names by its path.
//   KPURGATORY_VECTORS=DIR KPURGATORY_ADAPTER="..." node --test
import path from "node:path";
import { createRequire } from "node:module";
import { run, stdio } from "./index.js";

const name = process.env.KPURGATORY_BINDING;
await run(name && name !== "stdio" ? createRequire(import.meta.url)(path.resolve(name)) : stdio);
