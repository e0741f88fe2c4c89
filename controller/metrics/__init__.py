"""Metrics of the Odradek servers in Prometheus's text format, named after Kafka's JMX metrics.

- :mod:`controller.metrics.endpoint`: the ``/metrics`` HTTP endpoint every broker and controller serves
  (``--metrics-listen HOST:PORT``), with the process's CPU, memory and open files;
- :mod:`controller.metrics.stats`: plain counters and a fixed-bucket histogram that server threads update
  without importing Prometheus (read at scrape time);
- :mod:`controller.metrics.collector`: the controller's metrics, computed at scrape time.

The broker's metrics live in ``broker.metrics``; ``broker/metrics/README.md`` has the naming scheme and the
table from Kafka's JMX names to these.
"""
