"""``odradek perf``: producer, consumer and end-to-end performance tests in the manner of Kafka's
kafka-producer-perf-test, kafka-consumer-perf-test and EndToEndLatency (``stats``: the bookkeeping;
``produce`` and ``consume``: the loops; ``cli``: the commands)."""
