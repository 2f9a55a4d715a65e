"""The runtime core: client, channel, server, launcher and plans, storage and memory pools, streams
and scheduler, kernels and handles, config dataclasses, events, errors, tune. It imports nothing of
cubeplug above it (docs/architecture.md, "Layers")."""
