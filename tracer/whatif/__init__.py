"""The offline harness: vLLM's real Scheduler replaying a recorded or synthetic workload."""
