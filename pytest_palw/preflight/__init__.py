"""What the controller checks before any case runs: the model, the runtime's devices, the kernel
digest, the GPU share."""
