"""Live broker recording: a Java agent records what a real Kafka broker's purgatories do under client load
(conformance/live/README.md); this package reads the agent's event log (`recording`), turns each purgatory's calls
into concurrent histories judged like any other (`judge`, `kpurgatory validate-traces`), reports on them (`report`)
and records a broker (`command`: ``kpurgatory record-broker``)."""
