// node --test in this folder: every vector against the stdio binding (KPURGATORY_ADAPTER), or against the binding
// module KPURGATORY_BINDING names by its path (run in a worker thread).
//   KPURGATORY_VECTORS=DIR KPURGATORY_ADAPTER="..." node --test
import { run, stdio } from "./index.js";

const name = process.env.KPURGATORY_BINDING;
await run(name && name !== "stdio" ? name : stdio);
