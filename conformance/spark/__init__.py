"""kpurgatory on Spark: validating large trace corpora, recording them, and running conformance campaigns.

* `validate` — ``kpurgatory validate-traces``: replay every trace of a corpus through the model (the same `replay`
  as ``kpurgatory replay``), with bad input quarantined rather than fatal.
* `record` — ``kpurgatory record``: corpora from seeded random workloads run against an implementation.
* `campaign` — ``kpurgatory campaign``: seeded model-vs-implementation runs spread over executors.
* `bench` — ``kpurgatory spark-bench``: validate-traces throughput against one plain Python process.

Everything Spark runs here is a plain function over Arrow batches or seeds, testable without a JVM.
"""
