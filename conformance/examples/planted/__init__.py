"""Small timers with planted behaviour, to show what the contract level and declarations do (see README,
"Declaring what your timer promises"). Each is an in-process system under test: ``--impl
kpurgatory.conformance.examples.planted.MODULE:factory``."""
