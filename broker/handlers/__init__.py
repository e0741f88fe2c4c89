"""One module per Broker RPC (STYLE.md §7). Each exposes ``handle(ctx, request) -> response``: plain
functions over a :class:`~broker.context.BrokerContext` and protobuf messages, testable without gRPC."""
