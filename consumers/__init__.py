"""The pipeline's aiokafka services: quarantine, requeue and job status.

Each service package has the same shape: `config` (a frozen settings dataclass), the pure
logic, `app` (the Kafka glue and its `run_*` coroutine), `metrics` and `__main__`.
`consumers.runtime` holds what they share: the transactional consume-process-produce loop,
the topic tails that rebuild state, and the dead-letter records.
"""
