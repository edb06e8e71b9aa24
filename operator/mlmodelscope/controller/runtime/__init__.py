"""The operator's engine, which knows nothing of evaluations: keyed queues whose worker threads
take each key once however often it was queued (:mod:`.keyed`), delayed keyed calls on one
timer thread (:mod:`.retry_timer`), and threads that run a task every few seconds
(:mod:`.periodic`). What an evaluation, a Job or a pod needs is decided on top of it
(:mod:`..workqueue`, :mod:`..object_events`, the handlers and the resyncs)."""
