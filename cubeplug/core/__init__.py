"""The core runtime: client, channel, server contract, memory, streams, kernels, config, plugins."""
