"""One module per Broker RPC (docs/CONVENTIONS.md §7). Each exposes ``handle(ctx, request) -> response``: plain
functions over a :class:`~broker.context.BrokerContext` and protobuf messages, testable without gRPC."""
