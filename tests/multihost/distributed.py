"""What every worker of the loopback `jax.distributed` tests does first (after
setting `JAX_PLATFORMS=cpu`): float64, two virtual CPU devices per process, gloo
collectives, process `pid` of two on 127.0.0.1:`port`."""

import jax


def initialize(pid: int, port: str) -> list:
    """Join the two-process run. **Returns:** the four devices, process 0's
    first."""
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_num_cpu_devices", 2)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=2,
        process_id=pid,
        initialization_timeout=120,
        # A loaded machine (the test-suite runs in parallel processes) starved a
        # task's heartbeats past the 100 s default once: "Task 1 heartbeat
        # timeout" at the shutdown barrier.
        heartbeat_timeout_seconds=600,
    )
    assert jax.device_count() == 4 and jax.local_device_count() == 2
    return sorted(jax.devices(), key=lambda d: (d.process_index, d.id))
