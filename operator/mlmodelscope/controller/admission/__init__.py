"""Admission: whether an evaluation's Job may be created now.

- :mod:`.fifo`: FIFO admission under the concurrency limits, pure;
- :mod:`.ledger`: the slots held and the evaluations waiting, kept from the watch streams;
- :mod:`.admit`: creating the Job when admission allows it, queueing it otherwise, and starting
  queued evaluations when a slot frees; the operator's policy is checked on the way in.
"""
