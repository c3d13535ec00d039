"""What the consumer services share: records, the transactional loop, topic tails, settings."""
