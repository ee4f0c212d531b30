"""Per-claim probes that compile a helper (once, into the cache) and run it in a child: the producer
faults, the device pin, llama.cpp's test-backend-ops, the load probe."""
