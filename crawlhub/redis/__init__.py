"""Redis, as every part of crawlhub reaches it: how a client connects (redis_config.py: the URL,
TLS files, Sentinel, masking), the shared connection pools and the memory budget
(connections.py), and the Channels layer on the same Redis (channel_layer.py)."""
